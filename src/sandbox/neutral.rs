//! Neutralised configuration for the sets that run without a human (minimal, readonly; issue 19
//! item 2): the environment that keeps "read-only" programs from running programs named by
//! hostile configuration in the workspace or the home directory.
//!
//! git reads `.git/config` (written by the agent, or cloned), which can name programs git runs
//! on a plain `git status` / `git diff` / `git log`: `core.fsmonitor`, `core.pager`, hooks,
//! `gpg.program`, `core.sshCommand`, `diff.external`, and per-driver `diff.<d>.textconv`,
//! `diff.<d>.command`, `filter.<d>.clean/smudge/process` chosen by `.gitattributes`. The
//! command-line scope (`GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n`) overrides the repository's, so
//! each is set to something that runs nothing (`false`, `cat`, `true`, empty); the driver names
//! (and `diff.external`, overridden only where defined) are read from the repository's
//! effective configuration (`git config --list --name-only`, which runs no program) before the
//! command starts. Inside a repository, attributes are read from the empty tree
//! (`GIT_ATTR_SOURCE`), so the workspace's `.gitattributes` chooses no textconv or filter and a
//! plain `git diff` / `git log -p` works without the temp files the readonly set cannot write. System and global configuration are off
//! (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), bare repositories found by discovery
//! are ignored (`safe.bareRepository=explicit`), prompts are off.
//!
//! `less`: `LESSSECURE=1` (no shell escapes, no `LESSOPEN` preprocessor, no log files, no
//! editor), `LESSOPEN`/`LESSCLOSE` removed, `LESSKEYIN`/`LESSKEY` at `/dev/null` (a workspace
//! `.lesskey` — HOME is the workspace in these sets — is not read). `PAGER`/`GIT_PAGER` are
//! `cat`, `EDITOR`/`VISUAL` `false`.

use std::path::Path;
use std::process::{Command, Stdio};

/// Variables removed before the neutral ones are added.
const REMOVED: &[&str] = &[
    "LESSOPEN",
    "LESSCLOSE",
    "GIT_EXTERNAL_DIFF",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG",
    "GIT_EXEC_PATH",
];

const FIXED: &[(&str, &str)] = &[
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_PAGER", "cat"),
    ("PAGER", "cat"),
    ("EDITOR", "false"),
    ("VISUAL", "false"),
    ("LESSSECURE", "1"),
    ("LESSKEYIN", "/dev/null"),
    ("LESSKEY", "/dev/null"),
    ("LESSHISTFILE", "-"),
];

/// Configuration keys overridden for every repository.
pub const GIT_OVERRIDES: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("core.hooksPath", "/dev/null"),
    ("core.editor", "false"),
    ("core.sshCommand", "false"),
    ("core.askPass", "false"),
    ("core.gitProxy", "false"),
    ("sequence.editor", "false"),
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.x509.program", "false"),
    ("credential.helper", ""),
    ("protocol.ext.allow", "never"),
    ("safe.bareRepository", "explicit"),
    ("log.showSignature", "false"),
    ("pager.status", "false"),
];

/// Keys overridden only where the repository defines them: `diff.external` set to anything
/// makes `git diff` hand every file pair to that program through temp files, which the readonly
/// set cannot create — overriding it everywhere would break every plain `git diff`. Where the
/// repository names one, it becomes `true` (and the diff fails closed, running nothing).
const PRESENT_OVERRIDES: &[(&str, &str)] = &[("diff.external", "true")];

/// `GIT_ATTR_SOURCE` inside a repository: attributes come from the empty tree, not from the
/// workspace's `.gitattributes`, so no textconv, filter or diff driver is chosen by files the
/// agent writes and `git diff` / `git log -p` show the stored bytes (a textconv of a blob would
/// need a temp file the readonly set cannot create). `.git/info/attributes` is still read: a
/// driver chosen there is overridden below and fails closed. Outside a repository git refuses
/// the variable, so it is set only where the workdir is in one.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// Per-driver keys (`diff.<d>.textconv`…) and what they become.
const DRIVER_OVERRIDES: &[(&str, &str, &str)] = &[
    ("diff", "textconv", "cat"),
    ("diff", "command", "true"),
    ("filter", "clean", "cat"),
    ("filter", "smudge", "cat"),
    ("filter", "process", ""),
    ("filter", "required", "false"),
    ("merge", "driver", "false"),
];

/// The per-driver keys a repository configuration defines that name a program
/// (`diff.NAME.textconv`…), from `git config --list --name-only` output, each with the value
/// that runs nothing. Only keys present are overridden: a `diff.NAME.command = true` where the
/// repository had none would make git write temp files for an external diff it never had.
pub fn driver_overrides(listing: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in listing.lines() {
        if let Some((k, v)) = PRESENT_OVERRIDES
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(line))
        {
            let pair = (k.to_string(), v.to_string());
            if !out.contains(&pair) {
                out.push(pair);
            }
            continue;
        }
        let Some((section, rest)) = line.split_once('.') else {
            continue;
        };
        // the subsection is everything between the first and the last dot
        let Some((name, key)) = rest.rsplit_once('.') else {
            continue;
        };
        let hit = DRIVER_OVERRIDES
            .iter()
            .find(|(s, k, _)| s.eq_ignore_ascii_case(section) && k.eq_ignore_ascii_case(key));
        if let Some((s, k, v)) = hit {
            let pair = (format!("{s}.{name}.{k}"), v.to_string());
            if !name.is_empty() && !out.contains(&pair) {
                out.push(pair);
            }
        }
    }
    out
}

/// The repository configuration's keys as git sees them in `dir` (includes followed), with the
/// neutral environment, and whether `dir` is inside a repository (git lists keys of the
/// `local` scope); empty when there is none or git is missing. Runs no program named by
/// configuration (`git config` uses no pager, hook or fsmonitor here).
fn repo_config_names(dir: &Path) -> (String, bool) {
    // Outside any repository git lists nothing here (no system, global or environment
    // configuration in the neutral environment): no need to start it (issue 39, ~3 ms a
    // command).
    if !may_be_in_repository(dir) {
        return (String::new(), false);
    }
    let listing = git_config_listing(dir);
    let mut in_repo = false;
    let mut names = String::new();
    for line in listing.lines() {
        let (scope, name) = line.split_once('\t').unwrap_or(("", line));
        in_repo |= scope == "local" || scope == "worktree";
        names.push_str(name);
        names.push('\n');
    }
    (names, in_repo)
}

/// Whether git could find a repository from `dir`: some directory from `dir` up to `/` has an
/// entry `.git` (a directory, a gitfile, a symlink) or `HEAD` (a bare repository, or `dir`
/// inside a git dir). A superset of git's own discovery (which also stops at file system
/// boundaries and needs `objects/` and `refs/`), so `false` means git would find none.
fn may_be_in_repository(dir: &Path) -> bool {
    dir.ancestors().any(|a| {
        std::fs::symlink_metadata(a.join(".git")).is_ok()
            || std::fs::symlink_metadata(a.join("HEAD")).is_ok()
    })
}

fn git_config_listing(dir: &Path) -> String {
    let mut c = Command::new("git");
    c.args(["config", "--list", "--name-only", "--show-scope"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", super::process::SAFE_PATH)
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in FIXED {
        c.env(k, v);
    }
    c.output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Rewrites `env` for a command of the minimal or readonly set run in `workdir`; `None` for a
/// set that sees no workspace (minimal): no repository there to read, and no `git` started.
pub fn neutralise(env: &mut Vec<(String, String)>, workdir: Option<&Path>) {
    env.retain(|(k, _)| {
        !REMOVED.contains(&k.as_str())
            && !FIXED.iter().any(|(f, _)| f == k)
            && !k.starts_with("GIT_CONFIG_")
            && k != "GIT_ATTR_SOURCE"
    });
    env.extend(FIXED.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut pairs: Vec<(String, String)> = GIT_OVERRIDES
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (names, in_repo) = workdir.map(repo_config_names).unwrap_or_default();
    pairs.extend(driver_overrides(&names));
    if in_repo {
        env.push(("GIT_ATTR_SOURCE".into(), EMPTY_TREE.into()));
    }
    env.push(("GIT_CONFIG_COUNT".into(), pairs.len().to_string()));
    for (i, (k, v)) in pairs.into_iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{i}"), k));
        env.push((format!("GIT_CONFIG_VALUE_{i}"), v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_keys_present_are_overridden_with_dotted_names() {
        let listing = "core.pager\ndiff.x.textconv\ndiff.a.b.command\nfilter.lfs.clean\nFILTER.Up.smudge\nmerge.m.driver\nuser.name\ndiff.external\ndiff.x.binary\n";
        assert_eq!(
            driver_overrides(listing),
            vec![
                ("diff.x.textconv".into(), "cat".into()),
                ("diff.a.b.command".into(), "true".into()),
                ("filter.lfs.clean".into(), "cat".into()),
                ("filter.Up.smudge".into(), "cat".into()),
                ("merge.m.driver".into(), "false".into()),
                ("diff.external".into(), "true".into()),
            ]
        );
    }

    /// The shortcut is exact: where no `.git` or `HEAD` is found upwards, git itself lists
    /// nothing; a repository (a `.git` dir, a gitfile, a bare one) is always asked.
    #[test]
    fn git_is_skipped_only_where_it_would_find_no_repository() {
        let t = tempfile::tempdir().unwrap();
        let plain = t.path().join("plain/deep");
        std::fs::create_dir_all(&plain).unwrap();
        if std::path::Path::new("/.git").exists() || std::path::Path::new("/HEAD").exists() {
            return; // a repository at / makes every dir a candidate: nothing to compare
        }
        assert!(!may_be_in_repository(&plain));
        assert_eq!(repo_config_names(&plain), (String::new(), false));
        let git_here = Command::new("git").arg("--version").output().is_ok();
        if git_here {
            assert_eq!(
                git_config_listing(&plain),
                "",
                "git lists nothing outside a repo"
            );
        }
        let repo = t.path().join("repo/sub");
        std::fs::create_dir_all(t.path().join("repo/.git")).unwrap();
        std::fs::create_dir_all(&repo).unwrap();
        assert!(may_be_in_repository(&repo));
        let gitfile = t.path().join("wt");
        std::fs::create_dir_all(&gitfile).unwrap();
        std::fs::write(gitfile.join(".git"), "gitdir: /nowhere\n").unwrap();
        assert!(may_be_in_repository(&gitfile));
        let bare = t.path().join("bare.git");
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert!(may_be_in_repository(&bare));
        if git_here {
            let real = t.path().join("real");
            std::fs::create_dir_all(&real).unwrap();
            let ok = Command::new("git")
                .args(["init", "-q"])
                .current_dir(&real)
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                let (names, in_repo) = repo_config_names(&real);
                assert!(in_repo && names.contains("core."), "{names}");
            }
        }
    }

    #[test]
    fn the_workers_git_and_less_variables_are_replaced() {
        let mut env = vec![
            ("LESSOPEN".to_string(), "|sh x".to_string()),
            ("GIT_CONFIG_COUNT".to_string(), "9".to_string()),
            (
                "GIT_CONFIG_PARAMETERS".to_string(),
                "'core.pager'='sh'".to_string(),
            ),
            ("PAGER".to_string(), "sh".to_string()),
            ("LANG".to_string(), "C".to_string()),
        ];
        neutralise(&mut env, None);
        let get = |k: &str| {
            env.iter()
                .filter(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        assert!(get("LESSOPEN").is_empty() && get("GIT_CONFIG_PARAMETERS").is_empty());
        assert_eq!(get("PAGER"), vec!["cat"]);
        assert_eq!(get("LESSSECURE"), vec!["1"]);
        assert_eq!(get("LANG"), vec!["C"]);
        assert_eq!(
            get("GIT_CONFIG_COUNT"),
            vec![GIT_OVERRIDES.len().to_string().as_str()]
        );
    }
}
