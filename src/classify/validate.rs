//! Step 1 of DESIGN §5: the command text itself — length (≤ 4096 characters), no NUL, valid
//! UTF-8, not empty. Parsing is the next step (`parse.rs`); a failure at either is a clear
//! refusal, never "pure".

/// Maximum command length in characters (seed 001).
pub const MAX_CHARS: usize = 4096;

/// Check raw bytes (for callers that did not decode yet).
pub fn validate_bytes(b: &[u8]) -> Result<&str, String> {
    let s = std::str::from_utf8(b).map_err(|e| format!("command is not valid UTF-8 ({e})"))?;
    validate(s)?;
    Ok(s)
}

/// Check a command string.
pub fn validate(s: &str) -> Result<(), String> {
    if s.contains('\0') {
        return Err("command contains a NUL byte".into());
    }
    let n = s.chars().count();
    if n > MAX_CHARS {
        return Err(format!(
            "command is {n} characters long (maximum {MAX_CHARS})"
        ));
    }
    if s.trim().is_empty() {
        return Err("command is empty".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert!(validate("ls").is_ok());
        assert!(validate("").is_err());
        assert!(validate("  \n").is_err());
        assert!(validate("ls\0").is_err());
        assert!(validate(&"a".repeat(4097)).is_err());
        assert!(validate(&"é".repeat(4096)).is_ok());
        assert!(validate_bytes(b"ls \xff").is_err());
    }
}
