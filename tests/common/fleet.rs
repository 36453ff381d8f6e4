//! The fleet tests' harness over [`super::pg`] (issue 37): the operator's CLI against a registry
//! URL from a data dir of its own, and a migrated registry database of a test's own with its
//! login roles — one copy for `fleet`, `fleet_queue` and `fleet_rules`.

use super::pg::Cluster;
use super::BIN;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `brainloop ARGS` with `BRAINLOOP_REGISTRY_URL = url`, from the data dir `data` (the
/// operator's machine): (status, stdout, stderr).
pub fn brainloop(url: &str, data: &Path, args: &[&str]) -> (ExitStatus, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("BRAINLOOP_DATA_DIR", data)
        .env("BRAINLOOP_REGISTRY_URL", url)
        .output()
        .expect("run brainloop");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`brainloop`] that must succeed: its stdout.
pub fn ok(url: &str, data: &Path, args: &[&str]) -> String {
    let (st, o, e) = brainloop(url, data, args);
    assert!(st.success(), "brainloop {args:?}: {o}{e}");
    o
}

/// [`brainloop`] that must fail: its stderr.
pub fn refused(url: &str, data: &Path, args: &[&str]) -> String {
    let (st, o, e) = brainloop(url, data, args);
    assert!(!st.success(), "brainloop {args:?} must fail: {o}{e}");
    e
}

/// A migrated registry and its login roles (names prefixed by the database's: roles are
/// cluster-wide).
pub struct Registry {
    pub db: String,
    pub operator: String,
    pub reviewer: String,
    pub workers: Vec<String>,
}

static DBS: AtomicUsize = AtomicUsize::new(0);

/// A registry database of its own on `c`, migrated through `admin(db)` (the owner's URL), with
/// an operator, a reviewer and `workers`.
pub fn registry_via(
    c: &Cluster,
    admin: &dyn Fn(&str) -> String,
    tag: &str,
    workers: &[&str],
) -> Registry {
    let db = format!("reg_{tag}_{}", DBS.fetch_add(1, Ordering::SeqCst));
    c.create_db(&db);
    let admin = admin(&db);
    let tmp = tempfile::tempdir().unwrap();
    let out = ok(&admin, tmp.path(), &["registry", "migrate"]);
    assert!(out.contains("migrated from version 0 to "), "{out}");
    let role = |kind: &str, name: String| {
        ok(&admin, tmp.path(), &["registry", "add-role", kind, &name]);
        name
    };
    Registry {
        operator: role("operator", format!("{db}_op")),
        reviewer: role("reviewer", format!("{db}_rv")),
        workers: workers
            .iter()
            .map(|w| role("worker", format!("{db}_{w}")))
            .collect(),
        db,
    }
}

/// [`registry_via`] with the cluster's own owner URL.
pub fn registry(c: &Cluster, tag: &str, workers: &[&str]) -> Registry {
    registry_via(c, &|db| c.admin_url(db), tag, workers)
}
