//! Dangerous patterns (DESIGN §5.5): rules on the walked operations first (they see through
//! quoting, escapes, `$IFS`, wrappers, nested `sh -c`, `find -exec`, `xargs`, functions),
//! regexes second (on code handed to other interpreters, on nested scripts that do not
//! parse, and a few whole-text shapes). A finding blocks the command; nothing lifts it.

use std::sync::OnceLock;

use regex::Regex;

use super::parse::{RawOp, Walked};
use super::types::{display_word, Category, DYN};

/// One blocking finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Stable identifier (`recursive-delete-root`, `download-to-shell`, ...).
    pub id: &'static str,
    pub reason: String,
}

/// Top-level directories whose recursive deletion / world-writable mode is blocked.
const SYSTEM_DIRS: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/lost+found",
    "/media",
    "/mnt",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/snap",
    "/srv",
    "/sys",
    "/usr",
    "/var",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local",
    "/usr/share",
    "/usr/include",
    "/var/lib",
    "/var/log",
    "/var/spool",
    "/etc/ssh",
    "/etc/systemd",
];

/// Account and privilege files (writes are blocked).
const PROTECTED_FILES: &[&str] = &[
    "/etc/passwd",
    "/etc/shadow",
    "/etc/group",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/doas.conf",
    "/etc/pam.d",
    "/etc/security",
    "/etc/ld.so.preload",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/crontab",
    "/etc/cron.d",
    "/etc/cron.hourly",
    "/etc/cron.daily",
    "/etc/cron.weekly",
    "/etc/cron.monthly",
    "/var/spool/cron",
    "/etc/polkit-1",
    "/etc/login.defs",
    "/etc/subuid",
    "/etc/subgid",
    "/etc/master.passwd",
    "/etc/ssh/sshd_config",
    "/root/.ssh",
    "~/.ssh/authorized_keys",
    "~/.ssh/authorized_keys2",
    "/etc/environment",
    "/etc/profile",
    "/etc/profile.d",
    "/etc/bash.bashrc",
    "/etc/systemd/system",
];

/// Normalise a path word: collapse `//`, `/./`, resolve `..` against absolute prefixes,
/// drop a trailing `/`.
pub fn normalize(p: &str) -> String {
    let (prefix, rest) = if let Some(r) = p.strip_prefix('~') {
        // ~ or ~/x; ~user stays as is
        if r.is_empty() || r.starts_with('/') {
            ("~", r)
        } else {
            return p.to_string();
        }
    } else if p.starts_with('/') {
        ("/", p)
    } else {
        return p.trim_end_matches('/').to_string();
    };
    let mut parts: Vec<&str> = Vec::new();
    for s in rest.split('/') {
        match s {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    if prefix == "~" {
        if parts.is_empty() {
            "~".into()
        } else {
            format!("~/{}", parts.join("/"))
        }
    } else {
        format!("/{}", parts.join("/"))
    }
}

fn has_glob(s: &str) -> bool {
    s.contains('*') || s.contains('?') || s.contains('[')
}

/// Why deleting `target` recursively is catastrophic, if it is.
pub fn critical_target(target: &str) -> Option<String> {
    if target.contains(DYN) {
        // computed parts: what if they are empty?
        let empty: String = target.chars().filter(|c| *c != DYN).collect();
        if empty.is_empty() {
            return None;
        }
        return critical_static(&empty).map(|why| {
            format!(
                "`{}` becomes {why} if the computed part is empty",
                display_word(target)
            )
        });
    }
    critical_static(target)
}

fn critical_static(target: &str) -> Option<String> {
    let t = target.trim();
    if t.is_empty() {
        return None;
    }
    // all-`..` paths climb out of the working directory
    if t.split('/').filter(|s| !s.is_empty()).all(|s| s == "..") && t.contains("..") {
        return Some(format!("`{t}` (a parent of the working directory)"));
    }
    let n = normalize(t);
    // strip trailing globs like /*, /.*, ~/* : deleting everything inside
    let base = n
        .trim_end_matches("/*")
        .trim_end_matches("/.*")
        .trim_end_matches("/*")
        .to_string();
    let base = if base.is_empty() {
        "/".to_string()
    } else {
        base
    };
    if base == "/" || n == "/*" {
        return Some("`/` (the root directory)".into());
    }
    if base == "~" || base.starts_with("~") && !base.contains('/') {
        return Some(format!("`{t}` (a home directory)"));
    }
    if base.starts_with('/') {
        let first = base.split('/').nth(1).unwrap_or("");
        if has_glob(first) {
            return Some(format!("`{t}` (a glob over top-level directories)"));
        }
        if SYSTEM_DIRS.contains(&base.as_str()) {
            return Some(format!("`{t}` (a system directory)"));
        }
        let parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
        if parts.len() == 2 && parts[0] == "home" {
            return Some(format!("`{t}` (a home directory)"));
        }
    }
    None
}

fn protected_file(target: &str) -> Option<&'static str> {
    let n = normalize(&target.replace(DYN, ""));
    PROTECTED_FILES.iter().copied().find(|p| {
        n == *p || n.starts_with(&format!("{p}/")) || (has_glob(&n) && glob_prefix_hits(&n, p))
    })
}

fn glob_prefix_hits(n: &str, p: &str) -> bool {
    let lit: String = n
        .chars()
        .take_while(|c| !matches!(c, '*' | '?' | '['))
        .collect();
    !lit.is_empty() && p.starts_with(&lit) && lit.len() > 5
}

fn is_block_device(t: &str) -> bool {
    let n = normalize(t);
    let Some(d) = n.strip_prefix("/dev/") else {
        return false;
    };
    const DEV: &[&str] = &[
        "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "loop", "md", "dm-", "mapper/", "disk/", "sr",
        "mtd", "nbd", "zram", "ram", "mem", "kmem", "port", "root", "sg", "bsg", "fd0", "fd1",
        "block/", "ubd",
    ];
    DEV.iter().any(|p| d.starts_with(p))
}

fn is_recursive(op: &RawOp) -> bool {
    op.parsed.has("-r") || op.parsed.has("-R") || op.parsed.has("--recursive")
}

fn is_rm(op: &RawOp) -> bool {
    op.canonical.as_deref() == Some("rm") && matches!(op.program.as_str(), "rm" | "srm")
}

fn interpreter_like(op: &RawOp) -> bool {
    op.is_shell
        || matches!(
            op.canonical.as_deref(),
            Some("python") | Some("eval") | Some("source")
        )
        || op.stdin_exec
}

/// Run every rule.
pub fn findings(ops: &[RawOp], walked: &Walked, raw: &str) -> Vec<Finding> {
    let mut f: Vec<Finding> = Vec::new();
    let mut push = |id: &'static str, reason: String| {
        if !f.iter().any(|x| x.id == id && x.reason == reason) {
            f.push(Finding { id, reason });
        }
    };

    for op in ops {
        let shown = format!(
            "{}{}{}",
            display_word(&op.program),
            if op.args.is_empty() { "" } else { " " },
            op.args
                .iter()
                .map(|a| display_word(a))
                .collect::<Vec<_>>()
                .join(" ")
        );
        // table-level blocks: mkfs, useradd, sudo ...
        if let Some(b) = &op.block {
            let id = if b.starts_with("privilege") {
                "privilege-elevation"
            } else if b.starts_with("filesystem") {
                "filesystem-format"
            } else {
                "account-files"
            };
            push(id, format!("{b}: `{shown}`"));
        }
        // recursive deletion of /, ~ or system directories
        if is_rm(op) && (is_recursive(op) || op.parsed.has("--no-preserve-root")) {
            for t in &op.writes {
                if let (Some(c), false) = (&op.cwd, t.starts_with('/') || t.starts_with('~')) {
                    if let Some(why) = critical_target(&format!("{c}/{t}")) {
                        push(
                            "recursive-delete",
                            format!("recursive deletion of {why} (after `cd {c}`): `{shown}`"),
                        );
                    }
                }
                if let Some(why) = critical_target(t) {
                    push(
                        "recursive-delete",
                        format!("recursive deletion of {why}: `{shown}`"),
                    );
                }
            }
        }
        if is_rm(op) && op.parsed.has("--no-preserve-root") {
            push("recursive-delete", format!("--no-preserve-root: `{shown}`"));
        }
        if op.canonical.as_deref() == Some("find") && op.parsed.has("-delete") {
            for t in &op.writes {
                if let Some(why) = critical_target(t) {
                    push(
                        "recursive-delete",
                        format!("find -delete over {why}: `{shown}`"),
                    );
                }
            }
        }
        if op.canonical.as_deref() == Some("rsync") && op.opts_start_with("--delete") {
            for t in &op.writes {
                if let Some(why) = critical_target(t) {
                    push(
                        "recursive-delete",
                        format!("rsync --delete into {why}: `{shown}`"),
                    );
                }
            }
        }
        if op.program == "mv" {
            for t in &op.reads {
                if let Some(why) = critical_target(t) {
                    push("recursive-delete", format!("moving away {why}: `{shown}`"));
                }
            }
        }
        if matches!(op.program.as_str(), "chown" | "chgrp") && is_recursive(op) {
            for t in &op.writes {
                if let Some(why) = critical_target(t) {
                    push(
                        "recursive-chown",
                        format!("recursive ownership change of {why}: `{shown}`"),
                    );
                }
            }
        }
        // a computed program name with recursive-delete arguments
        if op.program.contains(DYN) || op.program == "<unanalysable>" {
            let recursive = op.args.iter().any(|a| {
                a == "--recursive"
                    || (a.starts_with('-')
                        && !a.starts_with("--")
                        && (a.contains('r') || a.contains('R')))
            });
            if recursive {
                for t in op.args.iter().filter(|a| !a.starts_with('-')) {
                    if let Some(why) = critical_target(t) {
                        push(
                            "recursive-delete",
                            format!("computed program with recursive flags on {why}: `{shown}`"),
                        );
                    }
                }
            }
        }
        // chmod 777 / recursive world-writable
        if op.program == "chmod" {
            if let Some(mode) = op.parsed.operands.first() {
                let rec = is_recursive(op);
                match chmod_mode(mode) {
                    Mode::All777 => push(
                        "chmod-777",
                        format!("chmod 777 (everyone may write and run): `{shown}`"),
                    ),
                    Mode::WorldWritable if rec => push(
                        "chmod-777",
                        format!("recursive world-writable mode: `{shown}`"),
                    ),
                    _ => {}
                }
            }
        }
        // block devices
        let mut targets: Vec<&String> = op.writes.iter().collect();
        if op.program == "shred" || op.program == "wipefs" {
            targets.extend(op.args.iter().filter(|a| !a.starts_with('-')));
        }
        for t in &targets {
            if is_block_device(t) {
                push(
                    "block-device-write",
                    format!("writes to the block device {}: `{shown}`", display_word(t)),
                );
            }
        }
        // account and privilege files
        let mut wtargets: Vec<&String> = op.writes.iter().collect();
        if op.canonical.as_deref() == Some("sed")
            && (op.parsed.has("-i") || op.parsed.has("--in-place"))
        {
            wtargets.extend(op.reads.iter());
        }
        for t in wtargets {
            if let Some(p) = protected_file(t) {
                push(
                    "account-files",
                    format!("writes the account/privilege file {p}: `{shown}`"),
                );
            }
        }
        // nc -e, socat exec:
        if op.canonical.as_deref() == Some("nc") {
            let exec_flag = ["-e", "-c", "--exec", "--sh-exec", "--lua-exec"]
                .iter()
                .any(|x| op.parsed.has(x));
            let socat_exec = op.program == "socat"
                && op.args.iter().any(|a| {
                    let l = a.to_ascii_lowercase();
                    l.contains("exec:") || l.contains("system:")
                });
            if exec_flag || socat_exec {
                push(
                    "reverse-shell",
                    format!("binds a program to a network connection: `{shown}`"),
                );
            }
        }
    }

    // pipelines: download / decode / echo to a shell, reverse shells
    for x in ops.iter().filter(|o| o.stdin_exec && o.pipeline.is_some()) {
        let Some((pid, stage)) = x.pipeline else {
            continue;
        };
        for y in ops
            .iter()
            .filter(|o| matches!(o.pipeline, Some((p, s)) if p == pid && s != stage))
        {
            let ys = y.pipeline.map(|p| p.1).unwrap_or(0);
            if ys < stage {
                if y.network_source {
                    push(
                        "download-to-shell",
                        format!("network output piped into `{}`", display_word(&x.program)),
                    );
                } else if y.decoder {
                    push(
                        "decode-to-shell",
                        format!("decoded data piped into `{}`", display_word(&x.program)),
                    );
                } else if matches!(y.canonical.as_deref(), Some("echo") | Some("printf"))
                    && y.subst_of.is_none()
                {
                    push(
                        "echo-to-shell",
                        format!(
                            "`{}` output piped into `{}`",
                            display_word(&y.program),
                            display_word(&x.program)
                        ),
                    );
                }
            } else if y.network_source && x.is_shell {
                push(
                    "reverse-shell",
                    format!(
                        "`{}` piped into a network connection (`{}`)",
                        display_word(&x.program),
                        display_word(&y.program)
                    ),
                );
            }
        }
    }
    // bash <(curl ...), sh -c "$(curl ...)", eval "$(base64 -d ...)"
    for x in ops.iter().filter(|o| interpreter_like(o)) {
        for y in ops.iter().filter(|o| o.subst_of == Some(x.cmd_id)) {
            if y.network_source {
                push(
                    "download-to-shell",
                    format!(
                        "`{}` runs code downloaded by `{}`",
                        display_word(&x.program),
                        display_word(&y.program)
                    ),
                );
            } else if y.decoder {
                push(
                    "decode-to-shell",
                    format!(
                        "`{}` runs code decoded by `{}`",
                        display_word(&x.program),
                        display_word(&y.program)
                    ),
                );
            }
        }
    }
    // /dev/tcp with a shell
    let dev_tcp = ops
        .iter()
        .any(|o| o.redirect_op.is_some() && o.network_source);
    if dev_tcp
        && ops
            .iter()
            .any(|o| o.is_shell || o.stdin_exec || o.program == "exec")
    {
        push(
            "reverse-shell",
            "a shell wired to /dev/tcp or /dev/udp".into(),
        );
    }
    // fork bombs found by the walker
    for why in &walked.fork_bombs {
        push("fork-bomb", why.clone());
    }

    // ── second line: regexes ──
    let rx = regexes();
    let skeleton = unquoted_skeleton(raw);
    if hit(&rx.fork_bomb, &skeleton) {
        push("fork-bomb", "fork bomb shape".into());
    }
    if hit(&rx.dev_tcp_shell, &skeleton) {
        push(
            "reverse-shell",
            "interactive shell wired to /dev/tcp".into(),
        );
    }
    // arguments of programs that run strings (git -c core.pager=..., ssh -o ProxyCommand=...,
    // tar --checkpoint-action=exec=..., docker/kubectl exec ...)
    let arg_texts: Vec<String> = ops
        .iter()
        .filter(|o| {
            o.kind == super::types::OpKind::Command
                && !o.is_shell
                && (o.effects.has(Category::Process) || o.effects.has(Category::Unknown))
        })
        .map(|o| {
            o.args
                .iter()
                .map(|a| display_word(a))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let mut texts: Vec<&str> = walked.codes.iter().map(|(_, t)| t.as_str()).collect();
    texts.extend(arg_texts.iter().map(|s| s.as_str()));
    // nested scripts that did not parse are only reachable by regex
    let unparsed: Vec<&str> = walked
        .scripts
        .iter()
        .filter(|s| {
            walked
                .inner_errors
                .iter()
                .any(|e| e.contains(&display_word(s)))
        })
        .map(|s| s.as_str())
        .collect();
    texts.extend(unparsed);
    for t in texts {
        for (re, id, why) in &rx.code {
            if hit(re, t) {
                push(
                    id,
                    format!(
                        "{why} in code `{}`",
                        display_word(t).chars().take(80).collect::<String>()
                    ),
                );
            }
        }
        if hit(&rx.socket, t) && hit(&rx.spawn, t) {
            push(
                "reverse-shell",
                "code opens a socket and spawns a shell".into(),
            );
        }
    }
    f
}

/// The command text with the contents of quoted strings removed, so the whole-text
/// regexes do not fire on data (`echo ":(){ :|:& };:"`).
fn unquoted_skeleton(raw: &str) -> String {
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

impl RawOp {
    fn opts_start_with(&self, prefix: &str) -> bool {
        self.parsed.opts.iter().any(|o| o.name.starts_with(prefix))
    }
}

enum Mode {
    All777,
    WorldWritable,
    Other,
}

fn chmod_mode(m: &str) -> Mode {
    if !m.is_empty() && m.chars().all(|c| c.is_digit(8)) {
        let v = u32::from_str_radix(m, 8).unwrap_or(0) & 0o777;
        if v == 0o777 {
            return Mode::All777;
        }
        if v & 0o002 != 0 {
            return Mode::WorldWritable;
        }
        return Mode::Other;
    }
    // symbolic: [ugoa]*[+-=][rwxXst]*, comma separated
    let mut all_rwx = false;
    let mut ww = false;
    for clause in m.split(',') {
        let who: String = clause.chars().take_while(|c| "ugoa".contains(*c)).collect();
        let rest = &clause[who.len()..];
        let op = rest.chars().next().unwrap_or(' ');
        let perms = rest.get(1..).unwrap_or("");
        let everyone = who.is_empty() || who.contains('a') || who.contains('o');
        let ugo = who.is_empty()
            || who.contains('a')
            || (who.contains('u') && who.contains('g') && who.contains('o'));
        if (op == '+' || op == '=') && perms.contains('w') && everyone {
            ww = true;
            if ugo && perms.contains('r') && perms.contains('x') && !who.is_empty() {
                all_rwx = true;
            }
        }
    }
    if all_rwx {
        Mode::All777
    } else if ww {
        Mode::WorldWritable
    } else {
        Mode::Other
    }
}

/// Compiled second-line regexes. A pattern that failed to compile (impossible for these
/// literals; tested) matches everything, so the failure is closed.
struct Rx {
    fork_bomb: Option<Regex>,
    dev_tcp_shell: Option<Regex>,
    socket: Option<Regex>,
    spawn: Option<Regex>,
    code: Vec<(Option<Regex>, &'static str, &'static str)>,
}

fn hit(r: &Option<Regex>, t: &str) -> bool {
    r.as_ref().map(|r| r.is_match(t)).unwrap_or(true)
}

fn regexes() -> &'static Rx {
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

/// Category a finding is about (for detected_patterns).
pub fn pattern_category(id: &str) -> Category {
    match id {
        "download-to-shell" | "reverse-shell" => Category::Network,
        "recursive-delete" | "recursive-chown" | "chmod-777" | "block-device-write"
        | "account-files" | "filesystem-format" => Category::Filesystem,
        _ => Category::Process,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criticals() {
        for t in [
            "/", "//", "/*", "/.", "/usr/..", "~", "~/", "~/*", "/etc", "/usr/", "/e*", "..",
            "../..",
        ] {
            assert!(critical_target(t).is_some(), "{t}");
        }
        for t in [
            "build",
            "./target",
            "/tmp/x",
            "/etc/nginx/conf.d",
            "~/project",
            ".",
        ] {
            assert!(critical_target(t).is_none(), "{t}");
        }
        let dynroot = format!("{DYN}/");
        assert!(critical_target(&dynroot).is_some());
    }

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

    #[test]
    fn modes() {
        assert!(matches!(chmod_mode("777"), Mode::All777));
        assert!(matches!(chmod_mode("0777"), Mode::All777));
        assert!(matches!(chmod_mode("a+rwx"), Mode::All777));
        assert!(matches!(chmod_mode("o+w"), Mode::WorldWritable));
        assert!(matches!(chmod_mode("755"), Mode::Other));
        assert!(matches!(chmod_mode("u+x"), Mode::Other));
    }
}
