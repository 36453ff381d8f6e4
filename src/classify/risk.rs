//! Risk score (DESIGN §5.7): computed from the operations — their categories, recursive /
//! force flags, system or home targets, computed words, code fed to interpreters — not a
//! constant. 0.0 is harmless, ≥ 0.7 means `ask_warning`, 1.0 is blocked or unparseable.

use super::knowledge::Effects;
use super::parse::RawOp;
use super::types::{Category, DYN};

/// Threshold above which a command asks with a warning and is never promoted.
pub const WARNING_THRESHOLD: f64 = 0.7;

fn base(e: &Effects) -> f64 {
    let mut r: f64 = 0.0;
    for c in e.categories() {
        r = r.max(match c {
            Category::Pure => 0.0,
            Category::Readonly => 0.1,
            Category::Env => 0.3,
            Category::Filesystem => 0.4,
            Category::Network => 0.4,
            Category::Process => 0.5,
            Category::Unknown => 0.55,
        });
    }
    r
}

fn system_path(p: &str) -> bool {
    const SYS: &[&str] = &[
        "/etc", "/usr", "/bin", "/sbin", "/lib", "/boot", "/var", "/opt", "/root", "/sys", "/proc",
        "/srv", "/home",
    ];
    let p = p.trim_start_matches("//");
    (p.starts_with("/dev/") && !matches!(p, "/dev/null" | "/dev/stdout" | "/dev/stderr"))
        || SYS
            .iter()
            .any(|s| p == *s || p.starts_with(&format!("{s}/")))
}

fn secret_path(p: &str) -> bool {
    const S: &[&str] = &[
        "/etc/shadow",
        "/etc/gshadow",
        ".ssh/",
        "id_rsa",
        "id_ed25519",
        ".pem",
        ".key",
        ".env",
        "credentials",
        ".netrc",
        ".aws/",
        ".kube/config",
        ".docker/config",
        ".git-credentials",
        ".pgpass",
        "/proc/self/environ",
        "/environ",
    ];
    S.iter().any(|s| p.contains(s))
}

/// Risk of one operation.
pub fn op_risk(op: &RawOp) -> f64 {
    let mut r = base(&op.effects);
    let fs = op.effects.has(Category::Filesystem);
    if fs && (op.parsed.has("-r") || op.parsed.has("-R") || op.parsed.has("--recursive")) {
        r += 0.1;
    }
    if fs && (op.parsed.has("-f") || op.parsed.has("--force")) {
        r += 0.1;
    }
    if op.writes.iter().any(|w| system_path(w)) {
        r += 0.3;
    }
    if op
        .writes
        .iter()
        .any(|w| w.starts_with('~') || w == "." || w == ".." || w == "*" || w.starts_with(DYN))
    {
        r += 0.15;
    }
    if op.reads.iter().any(|w| secret_path(w)) {
        r += 0.5;
    }
    if op.program.contains(DYN) {
        r += 0.3;
    } else if op.dynamic() {
        r += 0.1;
    }
    if op.runs_file {
        r += 0.1;
    }
    if op.stdin_exec && !op.static_script {
        r += 0.2;
    }
    if op
        .via
        .iter()
        .any(|v| v.contains(" -c") || v == "eval" || v.starts_with("env -S"))
    {
        r += 0.1;
    }
    if op.background {
        r += 0.05;
    }
    if op.remote {
        r += 0.1;
    }
    r.clamp(0.0, 1.0)
}

/// Risk of the whole command from its operations' risks and effects.
pub fn command_risk(ops: &[RawOp], op_risks: &[f64], all: &Effects, blocked: bool) -> f64 {
    if blocked {
        return 1.0;
    }
    let mut r = op_risks.iter().copied().fold(0.0, f64::max);
    // Reading beside another effect adds nothing to it (issue 35: `./tool < input` was
    // `ask_warning` where `./tool input` was not); reading beside the network is the
    // exfiltration case below.
    let nonpure = all
        .categories()
        .into_iter()
        .filter(|c| *c != Category::Pure && *c != Category::Readonly)
        .count();
    if nonpure > 1 {
        r += 0.05 * (nonpure - 1) as f64;
    }
    if all.has(Category::Network) && (all.has(Category::Readonly) || all.has(Category::Filesystem))
    {
        r += 0.1;
    }
    if ops
        .iter()
        .any(|o| o.stdin_exec && !o.static_script && o.pipeline.is_some())
    {
        r += 0.1;
    }
    (r.clamp(0.0, 1.0) * 100.0).round() / 100.0
}
