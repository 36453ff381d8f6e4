//! What the sandbox guarantees, per permission set, on this kernel (graded confinement, issue
//! 20), and which mechanism provides each guarantee at each Landlock ABI level. The worker
//! refuses a command (fail closed) only when a guarantee its set states does not hold here, and
//! names that guarantee; `[sandbox] required = false` runs it anyway with every mechanism that
//! works. `brainloop sandbox` prints [`table`].
//!
//! Which guarantees each set states is a column of the profile table
//! (`crate::permset::PROFILES`, rendered in docs/permission-sets.md); this file owns the other
//! half: the mechanism behind each guarantee at each ABI level, and whether it holds.
//!
//! | guarantee | provided by |
//! |---|---|
//! | no file reads outside the read roots | Landlock ABI ≥ 1 |
//! | no file writes outside the write roots | Landlock ABI ≥ 1 |
//! | no rename/link moving a file between roots | ABI ≥ 2 REFER; ABI 1 refuses every cross-directory rename/link |
//! | no truncation of files only readable | ABI ≥ 3 TRUNCATE; below, the seccomp truncate guard (`truncate(2)`, `O_RDONLY\|O_TRUNC` refused) |
//! | no device ioctls beyond /dev/null-like devices | ABI ≥ 5 IOCTL_DEV; below, only null/zero/full/random/urandom can be opened (ABI 1) |
//! | no network (TCP, UDP, any interface) | network namespace (+ ABI ≥ 4 TCP bind/connect) |
//! | no signals to processes outside the sandbox | PID namespace (+ ABI ≥ 6 signal scoping) |
//! | no host abstract UNIX sockets | network namespace: every set has its own, the network sets' only way out being the egress proxy, issue 23 (+ ABI ≥ 6 scoping) |
//! | no ptrace, mount, namespaces, bpf, raw sockets, setuid files | seccomp |
//!
//! The network sets' "network only through the job's egress proxy (by host)" is not checked
//! here: it rests on the same network namespace as the abstract-socket guarantee.

use crate::permset::{Guarantee as Stated, PermissionSet, PROFILES};
use serde::Serialize;

/// The mechanisms that work on this machine (from the start-up probe).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mechanisms {
    /// User + mount + PID (+ network) namespaces can be created.
    pub namespaces: bool,
    /// The Landlock ABI the rules are built for (0: none).
    pub landlock_abi: i64,
    pub seccomp: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Guarantee {
    pub guarantee: &'static str,
    pub provided_by: String,
    pub holds: bool,
}

/// The guarantees `set` states (its row of the profile table), and whether each holds with `m`.
pub fn for_set(set: PermissionSet, m: &Mechanisms) -> Vec<Guarantee> {
    set.profile()
        .guarantees
        .iter()
        .map(|&g| {
            let (provided_by, holds) = mechanism(g, m);
            Guarantee {
                guarantee: g.text(),
                provided_by,
                holds,
            }
        })
        .collect()
}

/// What provides `g` with `m`, and whether it holds.
fn mechanism(g: Stated, m: &Mechanisms) -> (String, bool) {
    let abi = m.landlock_abi;
    let ll = abi >= 1;
    let plus = |n: i64, what: &str| {
        if abi >= n {
            format!(" + Landlock ABI {n} {what}")
        } else {
            String::new()
        }
    };
    match g {
        Stated::NoReadsOutsideRoots | Stated::NoWritesOutsideRoots => {
            ("Landlock ABI >= 1".into(), ll)
        }
        Stated::NoCrossRootRename => (
            if abi >= 2 {
                "Landlock ABI 2 REFER".into()
            } else {
                "Landlock ABI 1 (every cross-directory rename/link refused)".into()
            },
            ll,
        ),
        Stated::NoTruncationOfReadOnly => (
            if abi >= 3 {
                "Landlock ABI 3 TRUNCATE".into()
            } else {
                "seccomp truncate guard (truncate(2) and O_RDONLY|O_TRUNC refused)".into()
            },
            abi >= 3 || (ll && m.seccomp),
        ),
        Stated::NoDeviceIoctls => (
            if abi >= 5 {
                "Landlock ABI 5 IOCTL_DEV".into()
            } else {
                "Landlock ABI >= 1 (only those devices can be opened)".into()
            },
            ll,
        ),
        Stated::NoNetwork => (
            format!("network namespace{}", plus(4, "TCP bind/connect")),
            m.namespaces,
        ),
        Stated::NoOutsideSignals => (
            format!("PID namespace{}", plus(6, "signal scoping")),
            m.namespaces || abi >= 6,
        ),
        // Every set has its own network namespace (the network sets' only way out is the job's
        // egress proxy, issue 23), so the host's abstract sockets are out of reach on any ABI.
        Stated::NoHostAbstractSockets => (
            format!("network namespace{}", plus(6, "abstract-socket scoping")),
            m.namespaces || abi >= 6,
        ),
        Stated::NoPrivilegedSyscalls => ("seccomp".into(), m.seccomp),
    }
}

/// The first guarantee of `set` that does not hold with `m`, as an error naming it and its
/// mechanism; `None` when the set can run fully confined here.
pub fn unmet(set: PermissionSet, m: &Mechanisms) -> Option<String> {
    for_set(set, m).into_iter().find(|g| !g.holds).map(|g| {
        format!(
            "the {} set cannot guarantee \"{}\" on this kernel (needs {}; Landlock ABI here: {})",
            set.as_str(),
            g.guarantee,
            g.provided_by,
            m.landlock_abi
        )
    })
}

/// The sets the sandbox confines (every row of the profile table it can run), in table order.
pub fn sets() -> impl Iterator<Item = PermissionSet> {
    PROFILES.iter().filter(|p| p.confined).map(|p| p.set)
}

/// Per set: the guarantees and whether the set runs (fail closed) here.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SetReport {
    pub set: &'static str,
    pub runs: bool,
    pub refused_because: Option<String>,
    pub guarantees: Vec<Guarantee>,
    /// What `socket(2)` may create (the seccomp allowlist; every other family gets EPERM).
    pub socket_families: Vec<&'static str>,
}

pub fn table(m: &Mechanisms) -> Vec<SetReport> {
    sets()
        .map(|s| SetReport {
            set: s.as_str(),
            runs: unmet(s, m).is_none(),
            refused_because: unmet(s, m),
            guarantees: for_set(s, m),
            socket_families: s.socket_families().iter().map(|f| f.name()).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(abi: i64) -> Mechanisms {
        Mechanisms {
            namespaces: true,
            landlock_abi: abi,
            seccomp: true,
        }
    }

    #[test]
    fn abi_2_runs_every_set_with_namespaces_and_seccomp() {
        for s in sets() {
            assert_eq!(unmet(s, &m(2)), None, "{s:?}");
            assert_eq!(unmet(s, &m(6)), None, "{s:?}");
        }
        // Without namespaces below ABI 6 the abstract sockets are what the network sets lack
        // (ABI 4: TRUNCATE and TCP rules in Landlock).
        let no_ns = Mechanisms {
            namespaces: false,
            ..m(4)
        };
        let e = unmet(PermissionSet::NetworkApi, &no_ns).unwrap();
        assert!(
            e.contains("signals") || e.contains("abstract UNIX sockets"),
            "{e}"
        );
    }

    #[test]
    fn without_landlock_or_namespaces_nothing_is_guaranteed() {
        for s in sets() {
            assert!(unmet(s, &m(0)).unwrap().contains("file reads"));
        }
        let no_ns = Mechanisms {
            namespaces: false,
            ..m(6)
        };
        assert!(unmet(PermissionSet::Minimal, &no_ns)
            .unwrap()
            .contains("no network"));
        let no_seccomp = Mechanisms {
            seccomp: false,
            ..m(2)
        };
        assert!(unmet(PermissionSet::Filesystem, &no_seccomp)
            .unwrap()
            .contains("truncation"));
    }
}
