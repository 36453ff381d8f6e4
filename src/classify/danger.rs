//! Dangerous patterns (DESIGN §5.5): rules on the walked operations first (they see through
//! quoting, escapes, `$IFS`, wrappers, nested `sh -c`, `find -exec`, `xargs`, functions),
//! regexes second (on code handed to other interpreters, on nested scripts that do not
//! parse, and a few whole-text shapes). A finding blocks the command; nothing lifts it.

use super::parse::{RawOp, Walked};
use super::paths::{
    chmod_mode, credential_file, critical_target, is_block_device, protected_file, Mode,
};
use super::regexes::{hit, regexes, unquoted_skeleton};
use super::types::{display_word, Category, DYN};

pub use super::paths::normalize;

/// One blocking finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Stable identifier (`recursive-delete-root`, `download-to-shell`, ...).
    pub id: &'static str,
    pub reason: String,
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
/// Long because it is the list of danger rules, a block each, kept in one place so that their
/// order and overlaps stay visible.
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
        if op.canonical.as_deref() == Some(crate::programs::Form::Find.name())
            && op.parsed.has("-delete")
        {
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
        for t in &op.reads {
            if let Some(p) = credential_file(t) {
                push(
                    "credential-read",
                    format!("reads the private key or credential store {p}: `{shown}`"),
                );
            }
        }
        for t in wtargets {
            if let Some(p) = protected_file(t) {
                push(
                    "account-files",
                    format!("writes the account, privilege or shell start-up file {p}: `{shown}`"),
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

impl RawOp {
    fn opts_start_with(&self, prefix: &str) -> bool {
        self.parsed.opts.iter().any(|o| o.name.starts_with(prefix))
    }
}

/// Category a finding is about (for detected_patterns).
pub fn pattern_category(id: &str) -> Category {
    match id {
        "download-to-shell" | "reverse-shell" => Category::Network,
        "credential-read" => Category::Readonly,
        "recursive-delete" | "recursive-chown" | "chmod-777" | "block-device-write"
        | "account-files" | "filesystem-format" => Category::Filesystem,
        _ => Category::Process,
    }
}
