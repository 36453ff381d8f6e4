//! Where workspace runners put their build output and caches (issue 35): this module owns the
//! client's **runner cache**, a brainloop-owned directory outside the workspace that a command
//! run on the overlay writes instead of the workspace — `target/`, `node_modules/.cache`-style
//! tool caches, Go's build and module caches, pip's cache, Python's byte code.
//!
//! Why: a build or test run on the overlay must change nothing in the workspace by itself. What
//! it left there (a `target/` whose fingerprints cargo trusts, `__pycache__`) would be applied to
//! the operator's workspace and later trusted by the operator's own toolchain — planted artifacts
//! would then run as the operator — and it would make every `cargo test` a change set to review.
//! With the cache, `cargo test` on the overlay changes nothing in the workspace: no change set,
//! no prompt.
//!
//! Decisions:
//!
//! - **Per (client, workspace)**: `<data dir>/runner-cache/<16 hex of sha256(client, workspace)>`,
//!   mode 0700. The sandbox grants write (Landlock, and a bind back when the data dir lies under a
//!   hidden directory such as `/tmp`) to that one directory only: another client's runs never
//!   see it, and no run sees the rest of the data dir.
//! - **Overlay runs only** (the `filesystem` set, no network): a run with network (asked up front,
//!   e.g. `cargo fetch`, `npm install`) never gets it, so nothing a run made without a human
//!   (a `build.rs`, a test) can plant there — a `CARGO_HOME/config.toml` with a `rustc-wrapper`, a
//!   poisoned registry source — ever runs with network. Offline runs are told so
//!   (`CARGO_NET_OFFLINE`, `GOPROXY=off`, `GOFLAGS=-mod=mod` is *not* set): dependencies come
//!   from the workspace (`node_modules`, `.venv`, `vendor/`) or from the cache's earlier offline
//!   runs.
//! - **Never the operator's**: the operator's `target/`, `~/.cargo`, `~/.cache` are not touched;
//!   the variables below point only into the cache, and the workspace's own `target/` is not
//!   read by cargo when `CARGO_TARGET_DIR` is set.
//! - **Persistent, not precious**: builds stay incremental between a client's runs; deleting the
//!   directory (any time the worker is stopped, or by hand) only costs a rebuild. Its size is not
//!   bounded by brainloop (the overlay caps bound only the workspace's upper layer): the operator
//!   prunes it (docs/operations.md).
//! - **Toolchains** outside the fixed PATH (rustup's `~/.rustup/toolchains/...`, a Go install)
//!   are the operator's `[sandbox] toolchains`: readable, never writable, their `bin/` appended to
//!   PATH for overlay runs.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The directory under the data dir that holds every client's runner cache.
pub const CACHE_DIR: &str = "runner-cache";

/// The runner cache of `client` in `workspace`.
pub fn cache_dir(data_dir: &Path, client: &str, workspace: &Path) -> PathBuf {
    let mut h = Sha256::new();
    h.update(client.as_bytes());
    h.update([0u8]);
    h.update(workspace.as_os_str().as_encoded_bytes());
    data_dir
        .join(CACHE_DIR)
        .join(hex::encode(&h.finalize()[..8]))
}

/// The variables an overlay run gets for the cache at `dir`: each program entry's
/// `runner_env` (its caches as subdirectories of `dir`, its fixed values — offline switches,
/// pytest's cache through `PYTEST_ADDOPTS` — with `{cache}` as `dir`), and `XDG_CACHE_HOME` for
/// every other tool. None of the entries' when the table failed to load (then the run still
/// writes its caches to the overlay, where the change set shows them).
pub fn env(dir: &Path) -> Vec<(String, String)> {
    let mut out = vec![(
        "XDG_CACHE_HOME".to_string(),
        dir.join("xdg-cache").display().to_string(),
    )];
    let Ok(t) = crate::programs::table() else {
        return out;
    };
    let (caches, set) = t.runner_env();
    out.extend(
        caches
            .iter()
            .map(|(k, sub)| (k.to_string(), dir.join(sub).display().to_string())),
    );
    let cache = dir.display().to_string();
    out.extend(
        set.iter()
            .map(|(k, v)| (k.to_string(), v.replace("{cache}", &cache))),
    );
    out
}

/// Creates the cache (mode 0700) if missing. Err: the run goes without it (its output then
/// lands on the overlay, where the change set shows it).
pub fn ensure(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// The environment and writable directory of an overlay run of `client`: the base environment
/// with the cache's variables and the toolchains' `bin/` appended to PATH. None for the cache
/// when it cannot be created.
pub fn for_overlay(
    base: Vec<(String, String)>,
    data_dir: &Path,
    client: &str,
    workspace: &Path,
    toolchains: &[PathBuf],
) -> (Vec<(String, String)>, Option<PathBuf>) {
    let mut env = base;
    let bins: Vec<String> = toolchains
        .iter()
        .map(|t| t.join("bin"))
        .filter(|b| b.is_dir())
        .map(|b| b.display().to_string())
        .collect();
    if !bins.is_empty() {
        for (k, v) in env.iter_mut() {
            if k == "PATH" {
                *v = format!("{v}:{}", bins.join(":"));
            }
        }
    }
    let dir = cache_dir(data_dir, client, workspace);
    match ensure(&dir) {
        Ok(()) => {
            let add = self::env(&dir);
            env.retain(|(k, _)| !add.iter().any(|(a, _)| a == k));
            env.extend(add);
            (env, Some(dir))
        }
        Err(e) => {
            tracing::warn!(error = %e, dir = %dir.display(), "runner cache unavailable; build output stays on the overlay");
            (env, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cache_per_client_and_workspace() {
        let d = Path::new("/data");
        let a = cache_dir(d, "a", Path::new("/ws"));
        assert!(a.starts_with("/data/runner-cache"));
        assert_ne!(a, cache_dir(d, "b", Path::new("/ws")));
        assert_ne!(a, cache_dir(d, "a", Path::new("/ws2")));
        // no ambiguity between (client, workspace) pairs that concatenate alike
        assert_ne!(
            cache_dir(d, "a/", Path::new("ws")),
            cache_dir(d, "a", Path::new("/ws"))
        );
        assert_eq!(a, cache_dir(d, "a", Path::new("/ws")));
    }

    #[test]
    fn every_variable_points_into_the_cache() {
        let dir = Path::new("/data/runner-cache/x");
        let env = env(dir);
        let (caches, _) = crate::programs::table().unwrap().runner_env();
        assert!(caches.len() >= 11, "{caches:?}");
        for (k, _) in caches.iter().chain([&("XDG_CACHE_HOME", "")]) {
            let v = &env.iter().find(|(n, _)| n == k).unwrap().1;
            assert!(Path::new(v).starts_with(dir), "{k}={v}");
        }
        assert!(
            env.iter()
                .any(|(k, v)| k == "PYTEST_ADDOPTS"
                    && v == "-o cache_dir=/data/runner-cache/x/pytest")
        );
        assert!(env
            .iter()
            .any(|(k, v)| k == "CARGO_NET_OFFLINE" && v == "true"));
        let (env, got) = for_overlay(
            vec![
                ("PATH".into(), "/usr/bin".into()),
                ("CARGO_TARGET_DIR".into(), "/ws/target".into()),
            ],
            tempfile::tempdir().unwrap().path(),
            "c",
            Path::new("/ws"),
            &[],
        );
        let got = got.unwrap();
        let targets: Vec<&String> = env
            .iter()
            .filter(|(k, _)| k == "CARGO_TARGET_DIR")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(targets.len(), 1, "{env:?}");
        assert!(Path::new(targets[0]).starts_with(&got));
    }
}

/// The subcommand table of issue 35, as the command path sees it: (command, reaches the overlay,
/// its signature is learnable, the signature). `overlay_capturable` false means asked up front.
#[cfg(test)]
mod table {
    use crate::bash::command::overlay_capturable;
    use crate::bash::policy::RISK_GATE;
    use crate::bash::signatures::of_report;
    use crate::classify::{check, Context};
    use std::path::Path;

    /// Long because it is one table of cases, a line each.
    #[test]
    fn subcommands_by_what_they_do() {
        let ws = Path::new("/ws");
        let cases: &[(&str, bool, Option<&str>)] = &[
            // local: build, test, lint, format, run the workspace's code
            ("cargo build", true, Some("cargo build")),
            ("cargo build --release", true, Some("cargo build --release")),
            ("cargo test", true, Some("cargo test")),
            ("cargo test -p core", true, Some("cargo test -p LITERAL")),
            ("cargo check", true, Some("cargo check")),
            ("cargo clippy", true, Some("cargo clippy")),
            ("cargo fmt", true, Some("cargo fmt")),
            ("cargo run", true, Some("cargo run")),
            ("cargo doc", true, Some("cargo doc")),
            ("npm test", true, Some("npm test")),
            ("npm run build", true, Some("npm run LITERAL")),
            ("pnpm test", true, Some("pnpm test")),
            ("yarn lint", true, Some("yarn lint")),
            ("npx eslint .", true, Some("npx eslint WS_PATH")),
            (
                "npx prettier --write .",
                true,
                Some("npx prettier --write WS_PATH"),
            ),
            ("npx tsc --noEmit", true, Some("npx tsc --noEmit")),
            ("npx jest", true, Some("npx jest")),
            (
                "npx --no-install tinylint src/",
                true,
                Some("npx tinylint --no-install WS_PATH"),
            ),
            ("npm pkg set name=x", true, Some("npm pkg LITERAL...")),
            ("npm pack --dry-run", true, Some("npm pack --dry-run")),
            ("npx vitest run", true, Some("npx vitest LITERAL")),
            ("go test ./...", true, Some("go test WS_PATH")),
            ("go build ./...", true, Some("go build WS_PATH")),
            ("go vet ./...", true, Some("go vet WS_PATH")),
            ("go fmt ./...", true, Some("go fmt WS_PATH")),
            ("gofmt -w main.go", true, Some("gofmt -w WS_PATH")),
            ("python3 -m unittest", true, Some("python3 -m unittest")),
            (
                "python3 -m unittest discover -v",
                true,
                Some("python3 -m unittest -v LITERAL"),
            ),
            ("python3 -m pytest -q", true, Some("python3 -m pytest -q")),
            (
                "python3 -m venv .venv",
                true,
                Some("python3 -m venv WS_PATH"),
            ),
            (
                "python3 -m py_compile a.py",
                true,
                Some("python3 -m py_compile WS_PATH"),
            ),
            ("node --test", true, Some("node --test")),
            ("black .", true, Some("black WS_PATH")),
            ("ruff format .", true, Some("ruff format WS_PATH")),
            ("ruff check --fix .", true, Some("ruff check --fix WS_PATH")),
            ("mypy src/", true, Some("mypy WS_PATH")),
            ("pytest -q", true, Some("pytest -q")),
            ("uv run pytest", true, Some("uv run LITERAL")),
            // network: asked up front, hosts through the egress proxy
            ("cargo install ripgrep", false, None),
            ("cargo add serde", false, None),
            ("cargo fetch", false, None),
            ("cargo update", false, None),
            ("cargo publish", false, None),
            ("cargo +nightly build", false, None),
            ("cargo foo", false, None),
            ("npm install", false, None),
            ("npm ci", false, None),
            ("npm i left-pad", false, None),
            ("npm exec foo", false, None),
            // issue 35: `init -y` writes package.json from its defaults, a local-path install
            // reaches no registry (`classify::npm`); a name runs `create-NAME` from it
            ("npm init -y", true, Some("npm init -y")),
            ("npm init vite -y", false, None),
            (
                "npm install --no-audit ./vendor/x.tgz",
                true,
                Some("npm install --no-audit WS_PATH"),
            ),
            ("npm install left-pad", false, None),
            ("npm install -g ./vendor/x.tgz", false, None),
            (
                "git clone -q remotes/r.git",
                true,
                Some("git clone -q WS_PATH"),
            ),
            ("git clone host:r.git", false, None),
            ("npm publish", false, None),
            ("yarn", false, None),
            ("yarn add x", false, None),
            ("pnpm dlx x", false, None),
            // issue 35: on the overlay nothing is downloaded, so any name runs what
            // node_modules/.bin has (or fails); the name stays literal in the signature
            ("npx cowsay hi", true, Some("npx cowsay LITERAL")),
            ("npx", false, None),
            ("npx --yes prettier --write .", false, None),
            ("npx -p typescript tsc", false, None),
            ("npx --no-install -p typescript tsc", false, None),
            ("npx tinylint src", true, Some("npx tinylint LITERAL")),
            ("go get example.com/x", false, None),
            ("go install example.com/x@latest", false, None),
            // GOPROXY=off on the overlay: mod and tool fetch nothing
            ("go mod tidy", true, Some("go mod LITERAL")),
            (
                "go mod init example.com/x",
                true,
                Some("go mod LITERAL WS_PATH"),
            ),
            ("pip install requests", false, None),
            ("pip3 install -r requirements.txt", false, None),
            ("python3 -m pip install requests", false, None),
            ("uv sync", false, None),
            ("poetry install", false, None),
            ("apt-get install x", false, None),
            // a program the workspace holds, `./` included (issue 35)
            (
                "./csvq data.csv 'age>80'",
                true,
                Some("csvq WS_PATH LITERAL"),
            ),
            ("../csvq data.csv", false, None),
        ];
        for (cmd, overlay, sig) in cases {
            let r = check(
                cmd,
                &Context {
                    workdir: Some(ws.to_path_buf()),
                },
            );
            assert!(!r.blocked, "{cmd}: blocked");
            assert_eq!(
                overlay_capturable(&r, ws, ws),
                *overlay,
                "{cmd}: overlay {:?}",
                r.operations
            );
            let sigs = of_report(&r, ws, ws);
            match sig {
                Some(text) => {
                    assert!(r.risk_score < RISK_GATE, "{cmd}: risk {}", r.risk_score);
                    assert_eq!(sigs.len(), 1, "{cmd}: {sigs:?}");
                    assert_eq!(sigs[0].text, *text, "{cmd}");
                    assert!(sigs[0].learnable, "{cmd}: {:?}", sigs[0].why_not);
                }
                None => assert!(sigs.iter().any(|s| !s.learnable), "{cmd}: {sigs:?}"),
            }
        }
    }
}
