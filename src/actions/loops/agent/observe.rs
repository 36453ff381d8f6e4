//! Observations fed back to the model: capped at [`CAP`] bytes on a UTF-8 boundary, saying how
//! much was cut, so one huge output cannot fill the context or the session row.

/// Bytes of one observation the model sees.
pub const CAP: usize = 4096;

/// `text` cut to at most `cap` bytes (on a character boundary) with a note of what was cut.
pub fn cap(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_string();
    }
    let mut end = cap;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[... {} of {} bytes cut]",
        &text[..end],
        text.len() - end,
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_unchanged_and_long_text_is_cut_on_a_char_boundary() {
        assert_eq!(cap("abc", 10), "abc");
        let s = "é".repeat(10); // 20 bytes
        let c = cap(&s, 5);
        assert!(c.starts_with("éé\n"), "{c}");
        assert!(c.contains("16 of 20 bytes cut"), "{c}");
        let big = "x".repeat(CAP * 3);
        let c = cap(&big, CAP);
        assert!(c.len() < CAP + 64);
        assert!(c.contains(&format!("{} of {} bytes cut", CAP * 2, CAP * 3)));
    }
}
