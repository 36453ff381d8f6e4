//! Small string helpers (vendored path dependency for the corpus benchmark).

/// Strip one pair of matching surrounding quotes (`"…"` or `'…'`).
pub fn unquote(s: &str) -> &str {
    let b = s.as_bytes();
    if b.len() >= 2 && (b[0] == b'"' || b[0] == b'\'') && b[b.len() - 1] == b[0] {
        &s[1..s.len() - 1]
    } else {
        s
    }
}

/// Split at the first `sep`, trimming both halves.
pub fn split_trim(s: &str, sep: char) -> Option<(&str, &str)> {
    let (a, b) = s.split_once(sep)?;
    Some((a.trim(), b.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unquotes() {
        assert_eq!(unquote("\"a b\""), "a b");
        assert_eq!(unquote("'x'"), "x");
        assert_eq!(unquote("'x\""), "'x\"");
    }

    #[test]
    fn splits() {
        assert_eq!(split_trim(" k = v ", '='), Some(("k", "v")));
        assert_eq!(split_trim("kv", '='), None);
    }
}
