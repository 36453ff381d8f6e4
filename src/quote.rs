//! Bounded quoting of values in messages (issue 21): an error or log line quotes at most a short
//! prefix of what a producer sent, so a 1 MiB value never lands whole in `results.error` or the
//! log.

/// The longest `error` a job's result row carries (bytes).
pub const ERROR_MAX: usize = 4096;
/// The longest part of a producer's value quoted inside a message (bytes).
pub const VALUE_MAX: usize = 200;

/// `s` cut to at most `max` bytes on a character boundary, saying how long it was.
pub fn prefix(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes in all]", &s[..end], s.len())
}

/// A job's error message, bounded by [`ERROR_MAX`].
pub fn error(s: String) -> String {
    if s.len() <= ERROR_MAX {
        s
    } else {
        prefix(&s, ERROR_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_on_a_char_boundary() {
        assert_eq!(prefix("abc", 5), "abc");
        let s = "é".repeat(1000);
        let p = prefix(&s, 7);
        assert!(p.starts_with("ééé…"), "{p}");
        assert!(p.ends_with("[2000 bytes in all]"), "{p}");
        assert!(error("x".repeat(1 << 20)).len() < ERROR_MAX + 40);
    }
}
