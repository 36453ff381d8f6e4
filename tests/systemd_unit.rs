//! The systemd deployment (DESIGN §3 "Shutdown", §9): `systemd/brainloop.service` keeps the
//! contract the daemon relies on, passes `scripts/check_unit.sh` (systemd-analyze verify +
//! security) when systemd-analyze is installed, and `scripts/init_command_security.sh` creates,
//! backs up and re-creates command_security.db, refusing while a worker holds the lock.

use brainloop::config::Config;
use brainloop::db::DbKind;
use brainloop::lockfile::LOCK_FILE;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn unit_path() -> PathBuf {
    repo().join("systemd/brainloop.service")
}

fn available(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

// ------------------------------------------------------------------------------------------------
// A minimal unit-file reader: sections, `Key=value` (repeatable), `#`/`;` comments, trailing `\`
// continuations. Enough for our own unit; systemd-analyze verify checks the real syntax.

#[derive(Debug, Default)]
struct Unit {
    sections: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

impl Unit {
    fn parse(text: &str) -> Unit {
        let mut unit = Unit::default();
        let mut section = String::new();
        let mut pending = String::new();
        for raw in text.lines() {
            let line = raw.trim();
            if pending.is_empty()
                && (line.is_empty() || line.starts_with('#') || line.starts_with(';'))
            {
                continue;
            }
            if let Some(cont) = line.strip_suffix('\\') {
                pending.push_str(cont);
                pending.push(' ');
                continue;
            }
            let full = format!("{pending}{line}");
            pending.clear();
            if full.starts_with('[') && full.ends_with(']') {
                section = full[1..full.len() - 1].to_string();
                continue;
            }
            let (key, value) = full
                .split_once('=')
                .unwrap_or_else(|| panic!("not a Key=value line in the unit: {full:?}"));
            unit.sections
                .entry(section.clone())
                .or_default()
                .entry(key.trim().to_string())
                .or_default()
                .push(value.trim().to_string());
        }
        unit
    }

    /// Every value of a key, in order (an empty assignment resets the list, as in systemd).
    fn all(&self, section: &str, key: &str) -> Vec<String> {
        let mut out = Vec::new();
        for v in self
            .sections
            .get(section)
            .and_then(|s| s.get(key))
            .into_iter()
            .flatten()
        {
            if v.is_empty() {
                out.clear();
            } else {
                out.push(v.clone());
            }
        }
        out
    }

    /// The effective (last) value of a key.
    fn get(&self, section: &str, key: &str) -> Option<String> {
        self.sections
            .get(section)
            .and_then(|s| s.get(key))
            .and_then(|v| v.last().cloned())
    }

    fn service(&self, key: &str) -> Option<String> {
        self.get("Service", key)
    }
}

fn load_unit() -> Unit {
    let text = std::fs::read_to_string(unit_path()).expect("read systemd/brainloop.service");
    Unit::parse(&text)
}

/// systemd time span ("60", "60s", "1min 30s", "500ms") in milliseconds.
fn timespan_ms(value: &str) -> u64 {
    let mut total = 0u64;
    for part in value.split_whitespace() {
        let split = part
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(part.len());
        let (num, unit) = part.split_at(split);
        let n: u64 = num
            .parse()
            .unwrap_or_else(|_| panic!("bad time span {value:?}"));
        let factor = match unit {
            "" | "s" | "sec" | "second" | "seconds" => 1000,
            "ms" | "msec" => 1,
            "m" | "min" | "minute" | "minutes" => 60_000,
            "h" | "hr" | "hour" | "hours" => 3_600_000,
            other => panic!("unsupported time unit {other:?} in {value:?}"),
        };
        total += n * factor;
    }
    total
}

/// `assert!` that returns the failure as `Err`, so that broken units can be checked too.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// `assert_eq!` that returns the failure as `Err`.
macro_rules! ensure_eq {
    ($left:expr, $right:expr $(,)?) => {
        ensure_eq!($left, $right, "{}", stringify!($left))
    };
    ($left:expr, $right:expr, $($msg:tt)+) => {
        // `match` keeps temporaries alive for the comparison, as in `assert_eq!`.
        match (&$left, &$right) {
            (left, right) => {
                if left != right {
                    return Err(format!("{}: {:?}, expected {:?}", format!($($msg)+), left, right));
                }
            }
        }
    };
}

fn is_yes(value: &str) -> bool {
    matches!(
        value.to_ascii_lowercase().as_str(),
        "yes" | "true" | "on" | "1"
    )
}

// ------------------------------------------------------------------------------------------------

#[test]
fn check_unit_script_passes_verify_and_security() {
    assert!(
        available("systemd-analyze", "--version"),
        "CANNOT RUN HERE: systemd-analyze is not installed (apt-get install systemd); scripts/check_unit.sh not run"
    );
    let out = Command::new("bash")
        .arg(repo().join("scripts/check_unit.sh"))
        .env("BRAINLOOP_BIN", env!("CARGO_BIN_EXE_brainloop"))
        .output()
        .expect("run scripts/check_unit.sh");
    assert!(
        out.status.success(),
        "check_unit.sh failed:\n{}",
        show(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let score = stdout
        .lines()
        .find(|l| l.starts_with("exposure score:"))
        .unwrap_or_else(|| panic!("no exposure score printed:\n{}", show(&out)));
    eprintln!("{score}");
    assert!(stdout.contains("verify: OK"), "{}", show(&out));
}

#[test]
fn check_unit_script_fails_on_a_typo() {
    assert!(
        available("systemd-analyze", "--version"),
        "CANNOT RUN HERE: systemd-analyze is not installed (apt-get install systemd)"
    );
    // systemd-analyze verify itself exits 0 here: the script must catch the warning.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(unit_path()).unwrap();
    let typo = dir.path().join("brainloop.service");
    std::fs::write(
        &typo,
        text.replace(
            "NoNewPrivileges=yes",
            "NoNewPrivileges=yes\nProtectSytem=full",
        ),
    )
    .unwrap();
    let out = Command::new("bash")
        .arg(repo().join("scripts/check_unit.sh"))
        .arg("--unit")
        .arg(&typo)
        .env("BRAINLOOP_BIN", env!("CARGO_BIN_EXE_brainloop"))
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a typo must fail the check:\n{}",
        show(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ProtectSytem"),
        "{}",
        show(&out)
    );
}

#[test]
fn unit_keeps_the_daemon_contract() {
    if let Err(e) = check_contract(&load_unit()) {
        panic!("systemd/brainloop.service breaks the daemon's contract: {e}");
    }
}

#[test]
fn the_contract_check_catches_a_broken_unit() {
    let text = std::fs::read_to_string(unit_path()).unwrap();
    let broken: [(&str, &str, &str); 15] = [
        ("Delegate=pids memory", "", "no Delegate"),
        ("LimitNOFILE=65536", "", "no LimitNOFILE"),
        (
            "LimitNOFILE=65536",
            "LimitNOFILE=1024:65536",
            "a soft LimitNOFILE of 1024",
        ),
        ("MemoryMax=6G", "", "no MemoryMax"),
        ("TasksMax=2048", "TasksMax=infinity", "TasksMax=infinity"),
        ("Type=notify", "Type=simple", "Type"),
        ("KillMode=mixed", "KillMode=control-group", "KillMode"),
        (
            "TimeoutStopSec=60",
            "TimeoutStopSec=90",
            "TimeoutStopSec > 60",
        ),
        ("WatchdogSec=30", "", "no WatchdogSec"),
        (
            "NoNewPrivileges=yes",
            "NoNewPrivileges=yes\nMemoryDenyWriteExecute=yes",
            "MemoryDenyWriteExecute",
        ),
        (
            "RestrictNamespaces=user mnt pid net",
            "RestrictNamespaces=yes",
            "RestrictNamespaces=yes",
        ),
        (
            "RestrictNamespaces=user mnt pid net",
            "RestrictNamespaces=mnt pid",
            "no user/net namespaces",
        ),
        (
            "SystemCallFilter=@system-service @mount",
            "SystemCallFilter=@system-service @mount\nSystemCallFilter=~@resources",
            "~@resources",
        ),
        (
            "NoNewPrivileges=yes",
            "NoNewPrivileges=yes\nProtectKernelTunables=yes",
            "ProtectKernelTunables",
        ),
        (
            "StateDirectory=brainloop brainloop-workspace",
            "StateDirectory=other",
            "StateDirectory",
        ),
    ];
    for (from, to, what) in broken {
        // Whole lines only, so that a comment mentioning the setting is never the one changed.
        let line = format!("\n{from}\n");
        assert!(
            text.contains(&line),
            "the unit no longer has the line {from:?}: update this test"
        );
        let unit = Unit::parse(&text.replacen(&line, &format!("\n{to}\n"), 1));
        match check_contract(&unit) {
            Ok(()) => panic!("the contract check accepted a unit with {what}"),
            Err(e) => eprintln!("rejected ({what}): {e}"),
        }
    }
}

fn check_contract(unit: &Unit) -> Result<(), String> {
    let defaults = Config::default();

    // sd_notify: READY/STOPPING/WATCHDOG from the worker process itself.
    ensure_eq!(unit.service("Type").as_deref(), Some("notify"));
    ensure_eq!(unit.service("NotifyAccess").as_deref(), Some("main"));

    // Shutdown: SIGTERM to the worker only; the drain + cancel grace fit in the stop timeout,
    // which is at most the 60 s of DESIGN §3.
    ensure_eq!(
        unit.service("KillMode").as_deref(),
        Some("mixed"),
        "systemd must not kill running commands before the drain"
    );
    if let Some(sig) = unit.service("KillSignal") {
        ensure!(
            sig == "SIGTERM" || sig == "TERM" || sig == "15",
            "KillSignal={sig}: the worker drains on SIGTERM"
        );
    }
    let stop_ms = timespan_ms(
        &unit
            .service("TimeoutStopSec")
            .ok_or("TimeoutStopSec= must be set (<= 60 s, DESIGN §3)")?,
    );
    ensure!(
        stop_ms <= 60_000,
        "TimeoutStopSec must be <= 60 s (DESIGN §3), is {stop_ms} ms"
    );
    // The whole stop fits in one budget from the signal (`shutdown::BUDGET`), which the drain
    // window and the cancel grace are held inside by `Config::validate`.
    let needed = brainloop::shutdown::BUDGET.as_millis() as u64;
    ensure!(
        defaults.drain_window_ms + defaults.cancel_grace_ms
            <= brainloop::config::MAX_DRAIN_WINDOW_MS,
        "the default drain window and cancel grace must fit in the shutdown budget"
    );
    ensure!(
        stop_ms >= needed,
        "TimeoutStopSec ({stop_ms} ms) must leave room for the shutdown budget ({needed} ms)"
    );

    // Watchdog: pinged every WatchdogSec/2, only while the supervisor loop ticks (at least every
    // poll_fallback_ms when idle), so it must be well above that period.
    let wd_ms = timespan_ms(
        &unit
            .service("WatchdogSec")
            .ok_or("WatchdogSec= must be set: the worker pings the systemd watchdog")?,
    );
    ensure!(wd_ms > 0, "WatchdogSec must be set");
    ensure!(
        wd_ms >= 4 * defaults.poll_fallback_ms,
        "WatchdogSec ({wd_ms} ms) is too close to the supervisor's idle tick ({} ms)",
        defaults.poll_fallback_ms
    );
    ensure_eq!(unit.service("Restart").as_deref(), Some("on-failure"));

    // Files: the data dir is the StateDirectory, mode 1770 (DESIGN §2); the workspace is writable
    // and not a parent of the data dir.
    let state_dirs: Vec<String> = unit
        .all("Service", "StateDirectory")
        .iter()
        .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect();
    ensure!(
        state_dirs.iter().any(|d| d == "brainloop"),
        "StateDirectory must include brainloop: {state_dirs:?}"
    );
    ensure_eq!(unit.service("StateDirectoryMode").as_deref(), Some("1770"));
    let exec = unit.service("ExecStart").ok_or("ExecStart")?;
    let args: Vec<&str> = exec.split_whitespace().collect();
    ensure_eq!(
        args.get(1..2),
        Some(&["run"][..]),
        "ExecStart must run `brainloop run`: {exec}"
    );
    let data_dir = args
        .windows(2)
        .find(|w| w[0] == "--data-dir")
        .map(|w| w[1])
        .ok_or_else(|| format!("ExecStart must pass --data-dir: {exec}"))?;
    ensure_eq!(
        data_dir,
        "/var/lib/brainloop",
        "the data dir must be the StateDirectory"
    );
    ensure!(
        !args.contains(&"--config"),
        "the config file is optional: ExecStart must not require it ({exec})"
    );
    for env_file in unit.all("Service", "EnvironmentFile") {
        ensure!(
            env_file.starts_with('-'),
            "EnvironmentFile={env_file} must be optional (`-` prefix)"
        );
    }
    let workspace = unit
        .all("Service", "Environment")
        .iter()
        .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find_map(|kv| kv.strip_prefix("BRAINLOOP_WORKSPACE=").map(str::to_string))
        .ok_or("Environment=BRAINLOOP_WORKSPACE=...")?;
    let rw_paths: Vec<String> = unit
        .all("Service", "ReadWritePaths")
        .iter()
        .flat_map(|v| {
            v.split_whitespace()
                .map(|p| p.trim_start_matches('-').to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let writable = state_dirs
        .iter()
        .any(|d| Path::new("/var/lib").join(d) == Path::new(&workspace))
        || rw_paths
            .iter()
            .any(|p| Path::new(&workspace).starts_with(p));
    ensure!(writable, "workspace {workspace} must be a StateDirectory or in ReadWritePaths (ProtectSystem=strict)");
    ensure!(
        !Path::new(data_dir).starts_with(&workspace),
        "the data dir must not lie inside the workspace"
    );
    ensure_eq!(unit.service("User").as_deref(), Some("brainloop"));

    // The Cerebras credential is optional: in systemd 252 a missing LoadCredential= file fails the
    // start unless a SetCredential= with the same id provides a fallback.
    for cred in unit.all("Service", "LoadCredential") {
        let id = cred.split(':').next().unwrap().to_string();
        let fallback = unit
            .all("Service", "SetCredential")
            .iter()
            .any(|s| s.split(':').next() == Some(id.as_str()));
        ensure!(
            fallback,
            "LoadCredential={cred} needs a SetCredential={id}:... fallback to stay optional"
        );
    }

    // What commands legitimately need (DESIGN §9, CRATES.md).
    if let Some(mdwe) = unit.service("MemoryDenyWriteExecute") {
        ensure!(
            !is_yes(&mdwe),
            "MemoryDenyWriteExecute breaks JITs in child processes"
        );
    }
    let ns = unit.service("RestrictNamespaces");
    if let Some(ns) = ns {
        ensure!(
            !is_yes(&ns),
            "RestrictNamespaces=yes forbids the sandbox's namespaces"
        );
        let lower = ns.to_ascii_lowercase();
        if lower != "no" && lower != "false" && lower != "off" && lower != "0" {
            let (deny, list) = match ns.strip_prefix('~') {
                Some(rest) => (true, rest),
                None => (false, ns.as_str()),
            };
            let listed: Vec<&str> = list.split_whitespace().collect();
            for needed in ["user", "net", "mnt", "pid"] {
                ensure_eq!(
                    listed.contains(&needed),
                    !deny,
                    "RestrictNamespaces={ns} must allow {needed} (the command sandbox unshares it)"
                );
            }
        }
    }
    let filters = unit.all("Service", "SystemCallFilter");
    let allowed: Vec<&str> = filters
        .iter()
        .filter(|f| !f.starts_with('~'))
        .flat_map(|f| f.split_whitespace())
        .collect();
    for f in filters.iter().filter(|f| f.starts_with('~')) {
        ensure!(
            !f.contains("@resources"),
            "SystemCallFilter={f}: do not deny @resources (setrlimit)"
        );
    }
    if !allowed.is_empty() {
        for sc in [
            "landlock_create_ruleset",
            "landlock_add_rule",
            "landlock_restrict_self",
            "seccomp",
            "@mount",
        ] {
            ensure!(
                allowed.contains(&sc),
                "SystemCallFilter= must allow {sc} (the sandbox needs it)"
            );
        }
        ensure!(
            allowed.contains(&"@system-service") || allowed.contains(&"@resources"),
            "SystemCallFilter= must allow @resources"
        );
    }
    // Over-mounts in /proc make the kernel refuse a fresh proc mount in the sandbox's pid
    // namespace (mount_too_revealing); see the comment in the unit.
    for key in ["ProtectKernelTunables", "ProtectKernelLogs"] {
        if let Some(v) = unit.service(key) {
            ensure!(
                !is_yes(&v),
                "{key}=yes breaks `mount -t proc` inside the command sandbox's user+pid namespace"
            );
        }
    }
    if let Some(v) = unit.service("ProcSubset") {
        ensure!(
            v != "pid",
            "ProcSubset=pid hides /proc/meminfo, /proc/cpuinfo from commands"
        );
    }
    // Issue 20: per-job cgroups need the subtree delegated (pids and memory at least), and the
    // service as a whole has a memory and task ceiling.
    let delegate = unit.service("Delegate").unwrap_or_default();
    ensure!(
        is_yes(&delegate)
            || (delegate.split_whitespace().any(|c| c == "pids")
                && delegate.split_whitespace().any(|c| c == "memory")),
        "Delegate= must hand the pids and memory controllers to the worker (per-job cgroups), got {delegate:?}"
    );
    for key in ["MemoryMax", "TasksMax"] {
        let v = unit.service(key).unwrap_or_default();
        ensure!(
            !v.is_empty() && v != "infinity",
            "{key}= must set a ceiling for the service, got {v:?}"
        );
    }
    // Issue 33: descriptors for every run's egress connections (two each, at most
    // max_connections per run, `concurrency` runs) plus the worker's own, soft and hard.
    let nofile = unit.service("LimitNOFILE").unwrap_or_default();
    let need = 2 * defaults.concurrency as u64 * defaults.egress.max_connections as u64 + 1024;
    let fits = |v: &str| v == "infinity" || v.parse::<u64>().is_ok_and(|n| n >= need);
    let (soft, hard) = nofile.split_once(':').unwrap_or((&nofile, &nofile));
    ensure!(
        fits(soft) && fits(hard),
        "LimitNOFILE= must allow at least {need} descriptors (soft and hard) for the egress proxies, got {nofile:?}"
    );
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// scripts/init_command_security.sh

fn init_security(data_dir: &Path, force: bool) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("scripts/init_command_security.sh"));
    if force {
        cmd.arg("--force");
    }
    cmd.arg("--data-dir")
        .arg(data_dir)
        .env("BRAINLOOP_BIN", env!("CARGO_BIN_EXE_brainloop"))
        .env_remove("BRAINLOOP_DATA_DIR")
        .env_remove("BRAINLOOP_CONFIG")
        .output()
        .expect("run scripts/init_command_security.sh")
}

fn count_rows(db: &Path, hash: &str) -> i64 {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap_or_else(|e| panic!("open {}: {e}", db.display()));
    conn.query_row(
        "SELECT count(*) FROM commands_registry WHERE command_hash = ?1",
        [hash],
        |r| r.get(0),
    )
    .unwrap()
}

fn backups(data_dir: &Path) -> Vec<PathBuf> {
    let prefix = format!("{}.backup-", DbKind::Security.file_name());
    let mut out: Vec<PathBuf> = std::fs::read_dir(data_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with(&prefix)
                && !name.ends_with("-wal")
                && !name.ends_with("-shm")
                && !name.ends_with("-journal")
        })
        .collect();
    out.sort();
    out
}

/// Holds `flock` on a file through util-linux's flock(1) until dropped.
struct FlockHolder {
    child: Child,
}

impl FlockHolder {
    fn hold(path: &Path) -> FlockHolder {
        let mut child = Command::new("flock")
            .arg(path)
            .args(["sh", "-c", "echo $$ > \"$0\"; echo locked; read _"])
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn flock");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked", "flock did not take the lock");
        FlockHolder { child }
    }
}

impl Drop for FlockHolder {
    fn drop(&mut self) {
        drop(self.child.stdin.take()); // EOF ends `read`, sh and flock exit, the lock is released
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn init_command_security_creates_backs_up_and_refuses_while_locked() {
    assert!(
        available("flock", "--version"),
        "CANNOT RUN HERE: flock (util-linux) is not installed"
    );
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let db = data.join(DbKind::Security.file_name());

    // 1. Creates the database (and the data dir) from nothing.
    let out = init_security(&data, false);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        db.is_file(),
        "command_security.db not created:\n{}",
        show(&out)
    );

    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute(
        "INSERT INTO commands_registry (command_hash, command_text, first_seen) VALUES ('h-before', 'ls -la', 1)",
        [],
    )
    .unwrap();
    drop(conn);
    assert_eq!(count_rows(&db, "h-before"), 1);

    // 2. Without --force an existing database is left alone.
    let out = init_security(&data, false);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("already exists"),
        "{}",
        show(&out)
    );
    assert_eq!(count_rows(&db, "h-before"), 1);
    assert!(backups(&data).is_empty());

    // 3. --force: the old file goes to a timestamped backup (with its row), a fresh one replaces it.
    let out = init_security(&data, true);
    assert!(out.status.success(), "{}", show(&out));
    let found = backups(&data);
    assert_eq!(
        found.len(),
        1,
        "one backup expected: {found:?}\n{}",
        show(&out)
    );
    assert_eq!(
        count_rows(&found[0], "h-before"),
        1,
        "the backup must hold the old rows"
    );
    assert_eq!(
        count_rows(&db, "h-before"),
        0,
        "the new database must be empty"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&*found[0].to_string_lossy()),
        "{}",
        show(&out)
    );

    // 4. While another process holds brainloop.lock (a running worker), it refuses and changes nothing.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute(
        "INSERT INTO commands_registry (command_hash, command_text, first_seen) VALUES ('h-locked', 'pwd', 2)",
        [],
    )
    .unwrap();
    drop(conn);
    {
        let _holder = FlockHolder::hold(&data.join(LOCK_FILE));
        let out = init_security(&data, true);
        assert_eq!(
            out.status.code(),
            Some(1),
            "must refuse while the lock is held:\n{}",
            show(&out)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(LOCK_FILE) && stderr.contains("running"),
            "{}",
            show(&out)
        );
        assert_eq!(
            count_rows(&db, "h-locked"),
            1,
            "the database must be untouched"
        );
        assert_eq!(backups(&data).len(), 1, "no new backup while locked");
    }

    // 5. Once the lock is released, --force works again and keeps both backups apart.
    let out = init_security(&data, true);
    assert!(out.status.success(), "{}", show(&out));
    let found = backups(&data);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(count_rows(&db, "h-locked"), 0);
    assert!(
        found.iter().any(|b| count_rows(b, "h-locked") == 1),
        "the second backup holds the second row"
    );
}

#[test]
fn scripts_have_help_and_reject_unknown_arguments() {
    for script in [
        "install.sh",
        "uninstall.sh",
        "init_command_security.sh",
        "check_unit.sh",
        "kernel_matrix.sh",
    ] {
        let path = repo().join("scripts").join(script);
        let out = Command::new("bash")
            .arg(&path)
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success(), "{script} --help:\n{}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage:"),
            "{script}"
        );
        let out = Command::new("bash")
            .arg(&path)
            .arg("--no-such-option")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{script} must reject an unknown option:\n{}",
            show(&out)
        );
    }
}
