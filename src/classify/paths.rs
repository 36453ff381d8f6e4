//! Paths the danger rules care about: normalisation (`//`, `/./`, `..`), what a recursive
//! deletion must never reach (`/`, `~`, home and top-level system directories, globs over
//! them, computed words that are `/` when empty), account and privilege files, block
//! devices, and chmod modes that make things world-writable.

use super::types::{display_word, DYN};

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

/// Account and privilege files, and the files a login or a new shell runs (writes are blocked:
/// a line appended to `~/.bashrc` runs in every shell the operator opens — persistence, MITRE
/// T1546.004 — and the sandbox could not apply it to the real home anyway).
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
    "~/.bashrc",
    "~/.bash_profile",
    "~/.bash_login",
    "~/.bash_logout",
    "~/.profile",
    "~/.zshrc",
    "~/.zshenv",
    "~/.zprofile",
    "~/.zlogin",
    "~/.config/fish/config.fish",
    "~/.config/fish/conf.d",
    "~/.pam_environment",
    "/root/.bashrc",
    "/root/.bash_profile",
    "/root/.profile",
    "/root/.zshrc",
];

/// Private keys and credential stores of the user and the system (reads are blocked, issue
/// 35: an agent never needs them — the operator's secrets reach a request through the egress
/// proxy, never the sandbox, issue 38 — and a command reading one is the first half of an
/// exfiltration). A prefix ending in `_` matches any name it starts but a public key's
/// (`~/.ssh/id_rsa`, not `~/.ssh/id_rsa.pub`).
const CREDENTIAL_FILES: &[&str] = &[
    "~/.ssh/id_",
    "/root/.ssh/id_",
    "/etc/ssh/ssh_host_",
    "/etc/shadow",
    "/etc/gshadow",
    "~/.aws/credentials",
    "~/.netrc",
    "~/.git-credentials",
    "~/.gnupg",
    "~/.docker/config.json",
    "~/.kube/config",
    "~/.config/gh/hosts.yml",
    "~/.pypirc",
    "~/.npmrc",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
];

/// The credential file `target` reads, if it is one of [`CREDENTIAL_FILES`].
pub fn credential_file(target: &str) -> Option<&'static str> {
    let n = normalize(&target.replace(DYN, ""));
    CREDENTIAL_FILES.iter().copied().find(|p| {
        if p.ends_with('_') {
            n.strip_prefix(p).is_some_and(|rest| {
                !rest.is_empty() && !rest.contains('/') && !rest.ends_with(".pub")
            })
        } else {
            n == *p || n.starts_with(&format!("{p}/"))
        }
    })
}

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

pub fn protected_file(target: &str) -> Option<&'static str> {
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

pub fn is_block_device(t: &str) -> bool {
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

pub enum Mode {
    All777,
    WorldWritable,
    Other,
}

pub fn chmod_mode(m: &str) -> Mode {
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
    fn modes() {
        assert!(matches!(chmod_mode("777"), Mode::All777));
        assert!(matches!(chmod_mode("0777"), Mode::All777));
        assert!(matches!(chmod_mode("a+rwx"), Mode::All777));
        assert!(matches!(chmod_mode("o+w"), Mode::WorldWritable));
        assert!(matches!(chmod_mode("755"), Mode::Other));
        assert!(matches!(chmod_mode("u+x"), Mode::Other));
    }
}
