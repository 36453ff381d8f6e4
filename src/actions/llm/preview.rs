//! What a human sees before approving a write: the first lines of a new file, or a diff
//! (common prefix and suffix kept out, the changed middle shown) against the file it replaces.

const MAX_LINES: usize = 80;

/// The first lines of `content`.
pub fn head(content: &str) -> String {
    let lines: Vec<&str> = content.lines().collect();
    let mut out: String = lines
        .iter()
        .take(MAX_LINES)
        .map(|l| format!("+{l}\n"))
        .collect();
    if lines.len() > MAX_LINES {
        out.push_str(&format!("… ({} more lines)\n", lines.len() - MAX_LINES));
    }
    out
}

/// A unified-style diff from `old` to `new` (one hunk: everything between the first and the
/// last differing line).
pub fn diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (del, add) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    if del.is_empty() && add.is_empty() {
        return "(no change)\n".into();
    }
    let mut out = format!(
        "@@ -{},{} +{},{} @@\n",
        prefix + 1,
        del.len(),
        prefix + 1,
        add.len()
    );
    let body: Vec<String> = del
        .iter()
        .map(|l| format!("-{l}"))
        .chain(add.iter().map(|l| format!("+{l}")))
        .collect();
    for l in body.iter().take(2 * MAX_LINES) {
        out.push_str(l);
        out.push('\n');
    }
    if body.len() > 2 * MAX_LINES {
        out.push_str(&format!(
            "… ({} more changed lines)\n",
            body.len() - 2 * MAX_LINES
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_and_heads() {
        assert_eq!(diff("a\nb\nc\n", "a\nB\nc\n"), "@@ -2,1 +2,1 @@\n-b\n+B\n");
        assert_eq!(diff("a\n", "a\n"), "(no change)\n");
        assert_eq!(diff("", "x\n"), "@@ -1,0 +1,1 @@\n+x\n");
        let big: String = (0..100).map(|i| format!("{i}\n")).collect();
        assert!(head(&big).ends_with("… (20 more lines)\n"));
    }
}
