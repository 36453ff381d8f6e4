//! The second line of defence: regexes over code handed to other interpreters
//! (`python -c`, `perl -e`), over nested scripts that do not parse, over the arguments of
//! programs that run strings, and a few whole-text shapes (on the command with its quoted
//! data removed).

use std::sync::OnceLock;

use regex::Regex;

/// The command text with the contents of quoted strings removed, so the whole-text
/// regexes do not fire on data (`echo ":(){ :|:& };:"`).
pub fn unquoted_skeleton(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut q: Option<char> = None;
    let mut esc = false;
    for c in raw.chars() {
        if esc {
            esc = false;
            if q.is_none() {
                out.push(c);
            }
            continue;
        }
        match (q, c) {
            (_, '\\') if q != Some('\'') => esc = true,
            (None, '\'') | (None, '"') => {
                q = Some(c);
                out.push(c);
            }
            (Some(x), c) if c == x => {
                q = None;
                out.push(c);
            }
            (Some(_), _) => {}
            (None, c) => out.push(c),
        }
    }
    out
}

/// Compiled second-line regexes. A pattern that failed to compile (impossible for these
/// literals; tested) matches everything, so the failure is closed.
pub struct Rx {
    pub fork_bomb: Option<Regex>,
    pub dev_tcp_shell: Option<Regex>,
    pub socket: Option<Regex>,
    pub spawn: Option<Regex>,
    pub code: Vec<(Option<Regex>, &'static str, &'static str)>,
}

pub fn hit(r: &Option<Regex>, t: &str) -> bool {
    r.as_ref().map(|r| r.is_match(t)).unwrap_or(true)
}

pub fn regexes() -> &'static Rx {
    static R: OnceLock<Rx> = OnceLock::new();
    R.get_or_init(|| {
        let re = |s: &str| Regex::new(s).ok();
        Rx {
            fork_bomb: re(r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}"),
            dev_tcp_shell: re(r"\b(ba|z|k|da)?sh\s+-i\b[^\n]*/dev/(tcp|udp)/"),
            socket: re(r"(?i)\bsocket\b|TCPSocket|fsockopen|net\.Socket|IO::Socket"),
            spawn: re(r"(?i)subprocess|pty\.spawn|os\.dup2|/bin/(ba)?sh|exec\s*\(|popen|child_process|spawn\("),
            code: vec![
                (
                    re(r#"\brm\s+(-[A-Za-z]*\s+)*-[A-Za-z]*[rR][A-Za-z]*\s+(-[A-Za-z]+\s+)*['"]?(/|~|\$HOME)['"*]?(\s|$|['";)])"#),
                    "recursive-delete",
                    "recursive deletion of / or ~",
                ),
                (re(r#"rmtree\(\s*['"](/|~)['"/]"#), "recursive-delete", "recursive deletion of / or ~"),
                (re(r"\bmkfs(\.\w+)?\b|\bwipefs\b|\bmke2fs\b"), "filesystem-format", "filesystem creation"),
                (re(r"\bdd\b[^\n]*\bof=/dev/(sd|hd|vd|xvd|nvme|mmcblk)"), "block-device-write", "write to a block device"),
                (re(r"(curl|wget)[^|;\n]*\|\s*(sudo\s+)?(ba|z|da|k)?sh\b"), "download-to-shell", "download piped into a shell"),
                (re(r"\bchmod\s+(-R\s+)?0?777\b"), "chmod-777", "chmod 777"),
                (re(r#"open\([^)]*/etc/(passwd|shadow|sudoers)[^)]*['"][wa]"#), "account-files", "write to an account file"),
                (re(r"\b(sudo|doas|pkexec)\s"), "privilege-elevation", "privilege elevation"),
                (re(r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&"), "fork-bomb", "fork bomb"),
                (re(r"os\.fork\(\)[^\n]*while|while[^\n]*os\.fork\(\)"), "fork-bomb", "fork loop"),
            ],
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regexes_compile() {
        let r = regexes();
        assert!(
            r.fork_bomb.is_some()
                && r.dev_tcp_shell.is_some()
                && r.socket.is_some()
                && r.spawn.is_some()
        );
        assert!(r.code.iter().all(|(x, _, _)| x.is_some()));
    }
}
