//! What the sandbox guarantees, per permission set, on this kernel (graded confinement, issue
//! 20), and which mechanism provides each guarantee at each Landlock ABI level. The worker
//! refuses a command (fail closed) only when a guarantee its set states does not hold here, and
//! names that guarantee; `[sandbox] required = false` runs it anyway with every mechanism that
//! works. `brainloop sandbox` prints [`table`].
//!
//! | guarantee | sets | provided by |
//! |---|---|---|
//! | no file reads outside the read roots | all | Landlock ABI ≥ 1 |
//! | no file writes outside the write roots | all | Landlock ABI ≥ 1 |
//! | no rename/link moving a file between roots | all | ABI ≥ 2 REFER; ABI 1 refuses every cross-directory rename/link |
//! | no truncation of files only readable | all | ABI ≥ 3 TRUNCATE; below, the seccomp truncate guard (`truncate(2)`, `O_RDONLY\|O_TRUNC` refused) |
//! | no device ioctls beyond /dev/null-like devices | all | ABI ≥ 5 IOCTL_DEV; below, only null/zero/full/random/urandom can be opened (ABI 1) |
//! | no network (TCP, UDP, any interface) | minimal, readonly, filesystem | network namespace (+ ABI ≥ 4 TCP bind/connect) |
//! | no signals to processes outside the sandbox | all | PID namespace (+ ABI ≥ 6 signal scoping) |
//! | no host abstract UNIX sockets | all: network namespace (the network sets' own, whose only way out is the egress proxy, issue 23) (+ ABI ≥ 6 scoping) |
//! | network only through the job's egress proxy (by host) | network-api, mcp-standard | network namespace + forwarder (`forward.rs`, `egress/`) |
//! | no ptrace, mount, namespaces, bpf, raw sockets, setuid files | all | seccomp |

use super::Set;
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

/// The guarantees `set` states, and whether each holds with `m`.
pub fn for_set(set: Set, m: &Mechanisms) -> Vec<Guarantee> {
    let abi = m.landlock_abi;
    let ll = abi >= 1;
    let g = |guarantee, provided_by: String, holds| Guarantee {
        guarantee,
        provided_by,
        holds,
    };
    let plus = |n: i64, what: &str| {
        if abi >= n {
            format!(" + Landlock ABI {n} {what}")
        } else {
            String::new()
        }
    };
    let mut v = vec![
        g(
            "no file reads outside the read roots",
            "Landlock ABI >= 1".into(),
            ll,
        ),
        g(
            "no file writes outside the write roots",
            "Landlock ABI >= 1".into(),
            ll,
        ),
        g(
            "no rename/link moving a file between roots",
            if abi >= 2 {
                "Landlock ABI 2 REFER".into()
            } else {
                "Landlock ABI 1 (every cross-directory rename/link refused)".into()
            },
            ll,
        ),
        g(
            "no truncation of files it may only read",
            if abi >= 3 {
                "Landlock ABI 3 TRUNCATE".into()
            } else {
                "seccomp truncate guard (truncate(2) and O_RDONLY|O_TRUNC refused)".into()
            },
            abi >= 3 || (ll && m.seccomp),
        ),
        g(
            "no device ioctls beyond null/zero/full/random/urandom",
            if abi >= 5 {
                "Landlock ABI 5 IOCTL_DEV".into()
            } else {
                "Landlock ABI >= 1 (only those devices can be opened)".into()
            },
            ll,
        ),
    ];
    if !set.network() {
        v.push(g(
            "no network (TCP, UDP, any interface)",
            format!("network namespace{}", plus(4, "TCP bind/connect")),
            m.namespaces,
        ));
    }
    v.push(g(
        "no signals to processes outside the sandbox",
        format!("PID namespace{}", plus(6, "signal scoping")),
        m.namespaces || abi >= 6,
    ));
    // Every set has its own network namespace (the network sets' only way out is the job's
    // egress proxy, issue 23), so the host's abstract sockets are out of reach on any ABI.
    v.push(g(
        "no host abstract UNIX sockets",
        format!("network namespace{}", plus(6, "abstract-socket scoping")),
        m.namespaces || abi >= 6,
    ));
    v.push(g(
        "no ptrace, mount, namespaces, bpf, raw sockets, setuid files",
        "seccomp".into(),
        m.seccomp,
    ));
    v
}

/// The first guarantee of `set` that does not hold with `m`, as an error naming it and its
/// mechanism; `None` when the set can run fully confined here.
pub fn unmet(set: Set, m: &Mechanisms) -> Option<String> {
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

pub const SETS: [Set; 5] = [
    Set::Minimal,
    Set::Readonly,
    Set::Filesystem,
    Set::NetworkApi,
    Set::McpStandard,
];

/// Per set: the guarantees and whether the set runs (fail closed) here.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SetReport {
    pub set: &'static str,
    pub runs: bool,
    pub refused_because: Option<String>,
    pub guarantees: Vec<Guarantee>,
}

pub fn table(m: &Mechanisms) -> Vec<SetReport> {
    SETS.iter()
        .map(|&s| SetReport {
            set: s.as_str(),
            runs: unmet(s, m).is_none(),
            refused_because: unmet(s, m),
            guarantees: for_set(s, m),
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
        for s in SETS {
            assert_eq!(unmet(s, &m(2)), None, "{s:?}");
            assert_eq!(unmet(s, &m(6)), None, "{s:?}");
        }
        // Without namespaces below ABI 6 the abstract sockets are what the network sets lack
        // (ABI 4: TRUNCATE and TCP rules in Landlock).
        let no_ns = Mechanisms {
            namespaces: false,
            ..m(4)
        };
        let e = unmet(Set::NetworkApi, &no_ns).unwrap();
        assert!(
            e.contains("signals") || e.contains("abstract UNIX sockets"),
            "{e}"
        );
    }

    #[test]
    fn without_landlock_or_namespaces_nothing_is_guaranteed() {
        for s in SETS {
            assert!(unmet(s, &m(0)).unwrap().contains("file reads"));
        }
        let no_ns = Mechanisms {
            namespaces: false,
            ..m(6)
        };
        assert!(unmet(Set::Minimal, &no_ns).unwrap().contains("no network"));
        let no_seccomp = Mechanisms {
            seccomp: false,
            ..m(2)
        };
        assert!(unmet(Set::Filesystem, &no_seccomp)
            .unwrap()
            .contains("truncation"));
    }
}
