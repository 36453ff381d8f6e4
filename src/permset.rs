//! The permission sets (seed 002) and what each one means: the single owner of that decision
//! (issue 32). One enum, [`PermissionSet`], and one table, [`PROFILES`], one row per set, ordered
//! from the narrowest to the widest: its name, what a command confined in it may read and write,
//! network, private tmp, UNIX sockets, whether git and less run with their configuration
//! neutralised, whether inference may choose it, whether the sandbox can confine it, whether it
//! may run unasked under an enforcing sandbox, and the guarantees it states.
//!
//! Everything else reads the table: the sandbox builds a command's confinement from the row
//! (`sandbox::spec_for`) and states the row's guarantees with the mechanism behind each
//! (`sandbox::guarantees`); the shell classifier and the code inference turn what they detected
//! into [`Needs`] and take the [`smallest`] set covering them; bash policy asks the row whether
//! a set has network; the actions name their set with the enum. `docs/permission-sets.md` is
//! rendered from the table by [`markdown`] (checked by `tests/permsets.rs`).
//!
//! Layer 0: imports nothing from the crate.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Seed 002's permission sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PermissionSet {
    Minimal,
    Readonly,
    Filesystem,
    NetworkApi,
    McpStandard,
    /// Manual only (the operator's unconfined override, not built): never inferred, refused in
    /// the MCP mapping, never run by the sandbox.
    Trusted,
}

/// How much of the workspace a set reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workspace {
    /// Not visible at all.
    None,
    /// Readable (HOME is the workspace when there is no private tmp).
    Read,
    /// Readable and writable.
    Write,
}

/// A guarantee a set states. The sandbox (`sandbox::guarantees`) says which mechanism provides
/// each one on this kernel and refuses a command when one of its set's does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarantee {
    NoReadsOutsideRoots,
    NoWritesOutsideRoots,
    NoCrossRootRename,
    NoTruncationOfReadOnly,
    NoDeviceIoctls,
    NoNetwork,
    NoOutsideSignals,
    NoHostAbstractSockets,
    NoPrivilegedSyscalls,
}

impl Guarantee {
    /// The sentence naming it (in `brainloop sandbox`, refusals, the docs).
    pub fn text(self) -> &'static str {
        match self {
            Guarantee::NoReadsOutsideRoots => "no file reads outside the read roots",
            Guarantee::NoWritesOutsideRoots => "no file writes outside the write roots",
            Guarantee::NoCrossRootRename => "no rename/link moving a file between roots",
            Guarantee::NoTruncationOfReadOnly => "no truncation of files it may only read",
            Guarantee::NoDeviceIoctls => "no device ioctls beyond null/zero/full/random/urandom",
            Guarantee::NoNetwork => "no network (TCP, UDP, any interface)",
            Guarantee::NoOutsideSignals => "no signals to processes outside the sandbox",
            Guarantee::NoHostAbstractSockets => "no host abstract UNIX sockets",
            Guarantee::NoPrivilegedSyscalls => {
                "no ptrace, mount, namespaces, bpf, raw sockets, setuid files"
            }
        }
    }
}

/// The guarantees of a confined set without network, in the order they are checked and shown.
const CONFINED: &[Guarantee] = &[
    Guarantee::NoReadsOutsideRoots,
    Guarantee::NoWritesOutsideRoots,
    Guarantee::NoCrossRootRename,
    Guarantee::NoTruncationOfReadOnly,
    Guarantee::NoDeviceIoctls,
    Guarantee::NoNetwork,
    Guarantee::NoOutsideSignals,
    Guarantee::NoHostAbstractSockets,
    Guarantee::NoPrivilegedSyscalls,
];
/// The guarantees of a confined set with network (its only way out is the job's egress proxy,
/// issue 23: it still has its own network namespace, so the host's abstract sockets stay out).
const CONFINED_WITH_NETWORK: &[Guarantee] = &[
    Guarantee::NoReadsOutsideRoots,
    Guarantee::NoWritesOutsideRoots,
    Guarantee::NoCrossRootRename,
    Guarantee::NoTruncationOfReadOnly,
    Guarantee::NoDeviceIoctls,
    Guarantee::NoOutsideSignals,
    Guarantee::NoHostAbstractSockets,
    Guarantee::NoPrivilegedSyscalls,
];

/// A socket address family a set may create (see [`Profile::socket_families`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SocketFamily {
    Unix,
    Inet,
    Inet6,
}

impl SocketFamily {
    /// Its C name, as `brainloop sandbox` and the docs show it.
    pub fn name(self) -> &'static str {
        match self {
            SocketFamily::Unix => "AF_UNIX",
            SocketFamily::Inet => "AF_INET",
            SocketFamily::Inet6 => "AF_INET6",
        }
    }
    /// The `domain` argument of `socket(2)`.
    pub fn domain(self) -> i32 {
        match self {
            SocketFamily::Unix => libc::AF_UNIX,
            SocketFamily::Inet => libc::AF_INET,
            SocketFamily::Inet6 => libc::AF_INET6,
        }
    }
}

/// The families of the sets whose way out is the egress proxy's forwarder on 127.0.0.1.
const NETWORK_FAMILIES: &[SocketFamily] =
    &[SocketFamily::Unix, SocketFamily::Inet, SocketFamily::Inet6];

/// What one set means. Every set reads the system dirs (`sandbox::SYSTEM_DIRS`, the `/etc`
/// entries programs need, its own /proc) and may use the null-like devices.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    pub set: PermissionSet,
    /// Seed 002's name: the only spelling accepted by [`parse`], stored and shown.
    pub name: &'static str,
    /// One line for the docs.
    pub summary: &'static str,
    pub workspace: Workspace,
    /// Also reads the operator's `[sandbox] readable_roots`.
    pub readable_roots: bool,
    /// Network, only through the job's egress proxy (issue 23).
    pub network: bool,
    /// A fresh per-job directory, writable, announced as TMPDIR and HOME.
    pub private_tmp: bool,
    /// The socket families a command may create (`socket(domain, …)`), an allowlist: every
    /// other family (netlink, vsock — which ignores network namespaces —, packet, Bluetooth,
    /// …) is refused with EPERM by the sandbox's seccomp filter; `socketpair` always works.
    /// UNIX only in the sets a human granted network to: the others run before any human looks,
    /// and a socket is a way out of their confinement (a host daemon listening on a path:
    /// Landlock does not govern `connect`). INET and INET6 only where the egress proxy's
    /// forwarder is the way out (the network sets; an overlay run given one gets them too,
    /// `sandbox::socket_families`).
    pub socket_families: &'static [SocketFamily],
    /// git and less run with their configuration neutralised (`sandbox::neutral`): the sets
    /// that run without a human.
    pub neutralised: bool,
    /// Covers effects no narrower reach names: environment, process control, unknown programs,
    /// dynamic code, mixed network and workspace access with no narrower set.
    pub any_effect: bool,
    /// Inference (the shell classifier, the code inference, the MCP mapping) may give it.
    pub inferred: bool,
    /// The sandbox has a confinement for it (and runs commands in it).
    pub confined: bool,
    /// A command of this set below the warning gate may run unasked when an enforcing sandbox
    /// confines it (DESIGN §5.7).
    pub unasked_when_confined: bool,
    /// What the sandbox guarantees for it (empty when not confined).
    pub guarantees: &'static [Guarantee],
}

/// The table, narrowest first: [`smallest`] takes the first inferred row covering the needs.
pub const PROFILES: &[Profile] = &[
    Profile {
        set: PermissionSet::Minimal,
        name: "minimal",
        summary: "pure computation: arguments, stdin and stdout only",
        workspace: Workspace::None,
        readable_roots: false,
        network: false,
        private_tmp: false,
        socket_families: &[],
        neutralised: true,
        any_effect: false,
        inferred: true,
        confined: true,
        unasked_when_confined: false,
        guarantees: CONFINED,
    },
    Profile {
        set: PermissionSet::Readonly,
        name: "readonly",
        summary: "reads the workspace",
        workspace: Workspace::Read,
        readable_roots: false,
        network: false,
        private_tmp: false,
        socket_families: &[],
        neutralised: true,
        any_effect: false,
        inferred: true,
        confined: true,
        unasked_when_confined: true,
        guarantees: CONFINED,
    },
    Profile {
        set: PermissionSet::Filesystem,
        name: "filesystem",
        summary: "reads and writes the workspace",
        workspace: Workspace::Write,
        readable_roots: false,
        network: false,
        private_tmp: true,
        socket_families: &[],
        neutralised: false,
        any_effect: false,
        inferred: true,
        confined: true,
        unasked_when_confined: false,
        guarantees: CONFINED,
    },
    Profile {
        set: PermissionSet::NetworkApi,
        name: "network-api",
        summary: "network by host, no workspace",
        workspace: Workspace::None,
        readable_roots: false,
        network: true,
        private_tmp: true,
        socket_families: NETWORK_FAMILIES,
        neutralised: false,
        any_effect: false,
        inferred: true,
        confined: true,
        unasked_when_confined: false,
        guarantees: CONFINED_WITH_NETWORK,
    },
    Profile {
        set: PermissionSet::McpStandard,
        name: "mcp-standard",
        summary: "workspace read-write, readable roots, network by host; anything unknown",
        workspace: Workspace::Write,
        readable_roots: true,
        network: true,
        private_tmp: true,
        socket_families: NETWORK_FAMILIES,
        neutralised: false,
        any_effect: true,
        inferred: true,
        confined: true,
        unasked_when_confined: false,
        guarantees: CONFINED_WITH_NETWORK,
    },
    Profile {
        set: PermissionSet::Trusted,
        name: "trusted",
        summary: "unconfined, granted by the operator only (not built: never inferred, never run)",
        workspace: Workspace::Write,
        readable_roots: true,
        network: true,
        private_tmp: false,
        socket_families: NETWORK_FAMILIES,
        neutralised: false,
        any_effect: true,
        inferred: false,
        confined: false,
        unasked_when_confined: false,
        guarantees: &[],
    },
];

impl PermissionSet {
    /// Its row of [`PROFILES`].
    pub fn profile(self) -> &'static Profile {
        // The table has one row per variant, in variant order (checked by a unit test).
        &PROFILES[self as usize]
    }
    pub fn as_str(self) -> &'static str {
        self.profile().name
    }
    pub fn network(self) -> bool {
        self.profile().network
    }
    pub fn private_tmp(self) -> bool {
        self.profile().private_tmp
    }
    pub fn unix_sockets(self) -> bool {
        self.profile().socket_families.contains(&SocketFamily::Unix)
    }
    pub fn socket_families(self) -> &'static [SocketFamily] {
        self.profile().socket_families
    }
    /// Every set, in table order.
    pub fn all() -> impl Iterator<Item = PermissionSet> {
        PROFILES.iter().map(|p| p.set)
    }
}

/// An unknown permission set name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownSet(pub String);

impl fmt::Display for UnknownSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
        write!(
            f,
            "unknown permission set `{}` (known: {})",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownSet {}

/// The set named `name` (exact seed 002 spelling).
pub fn parse(name: &str) -> Result<PermissionSet, UnknownSet> {
    PROFILES
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.set)
        .ok_or_else(|| UnknownSet(name.to_string()))
}

impl std::str::FromStr for PermissionSet {
    type Err = UnknownSet;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

impl fmt::Display for PermissionSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set equals its name (`report.permission_set == "minimal"`).
impl PartialEq<&str> for PermissionSet {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for PermissionSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for PermissionSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        parse(&name).map_err(serde::de::Error::custom)
    }
}

/// What some code or command was found to reach, in the terms of the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub read: bool,
    pub write: bool,
    pub network: bool,
    /// Anything else: environment, process control, unknown programs, dynamic code.
    pub other: bool,
}

impl Needs {
    pub const NONE: Needs = Needs {
        read: false,
        write: false,
        network: false,
        other: false,
    };
    pub const READ: Needs = Needs {
        read: true,
        ..Needs::NONE
    };
    pub const WRITE: Needs = Needs {
        write: true,
        ..Needs::NONE
    };
    pub const NETWORK: Needs = Needs {
        network: true,
        ..Needs::NONE
    };
    pub const OTHER: Needs = Needs {
        other: true,
        ..Needs::NONE
    };
    /// Everything `self` or `other` needs.
    pub fn union(self, other: Needs) -> Needs {
        Needs {
            read: self.read || other.read,
            write: self.write || other.write,
            network: self.network || other.network,
            other: self.other || other.other,
        }
    }
}

impl Profile {
    /// Whether a command of this set can do everything `n` names.
    pub fn covers(&self, n: Needs) -> bool {
        (!n.read || self.workspace >= Workspace::Read)
            && (!n.write || self.workspace == Workspace::Write)
            && (!n.network || self.network)
            && (!n.other || self.any_effect)
    }
}

/// The narrowest inferred set covering `n` (seed 002's rules: nothing → minimal; reads →
/// readonly; writes → filesystem; network only → network-api; anything else → mcp-standard).
pub fn smallest(n: Needs) -> PermissionSet {
    PROFILES
        .iter()
        .find(|p| p.inferred && p.covers(n))
        .map(|p| p.set)
        // Unreachable: a unit test checks that an inferred row covers every need.
        .unwrap_or(PermissionSet::McpStandard)
}

/// The families column: the C names, or "none" (every `socket(2)` refused; `socketpair` works).
fn families(p: &Profile) -> String {
    if !p.confined {
        return "any".into();
    }
    if p.socket_families.is_empty() {
        return "none".into();
    }
    let names: Vec<&str> = p.socket_families.iter().map(|f| f.name()).collect();
    names.join(", ")
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn reads(p: &Profile) -> String {
    let mut s = String::from("system dirs");
    if p.workspace >= Workspace::Read {
        s.push_str(" + workspace");
    }
    if p.readable_roots {
        s.push_str(" + `[sandbox] readable_roots`");
    }
    s
}

fn writes(p: &Profile) -> String {
    let mut parts = vec!["null-like devices"];
    if p.workspace == Workspace::Write {
        parts.push("workspace");
    }
    if p.private_tmp {
        parts.push("private tmp");
    }
    parts.join(" + ")
}

/// `docs/permission-sets.md`, rendered from [`PROFILES`].
pub fn markdown() -> String {
    let mut o = String::from(
        "# Permission sets\n\n\
         Generated from the profile table in `src/permset.rs` (`permset::markdown`); do not edit.\n\
         Regenerate with `BRAINLOOP_BLESS=1 cargo test --release --test permsets`.\n\n\
         Rows go from the narrowest set to the widest; inference gives the first inferred row that\n\
         covers what it found. \"System dirs\" are `/usr`, `/bin`, `/lib*`, the `/etc` entries\n\
         programs need and the command's own `/proc`; the private tmp is a fresh per-job directory\n\
         announced as `TMPDIR` and `HOME`. Network goes only through the job's egress proxy, by host.\n\
         Socket families are an allowlist: `socket(2)` with any other family (netlink, vsock,\n\
         packet, ...) is refused with EPERM; `socketpair` always works; an overlay run that reaches\n\
         approved hosts also gets `AF_INET`, `AF_INET6` to reach the proxy's forwarder.\n\n\
         | set | meaning | reads | writes | network | private tmp | socket families | git/less neutralised | inferred | confined | unasked when confined |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for p in PROFILES {
        o.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            p.name,
            p.summary,
            if p.confined {
                reads(p)
            } else {
                "anything".into()
            },
            if p.confined {
                writes(p)
            } else {
                "anything".into()
            },
            yes(p.network),
            yes(p.private_tmp),
            families(p),
            yes(p.neutralised),
            yes(p.inferred),
            yes(p.confined),
            yes(p.unasked_when_confined),
        ));
    }
    o.push_str("\n## Guarantees\n\nWhat the sandbox guarantees per set; `brainloop sandbox` shows which mechanism provides\neach on this kernel. A command is refused when one of its set's guarantees does not hold\n(unless `[sandbox] required = false`).\n\n| guarantee |");
    for p in PROFILES {
        o.push_str(&format!(" {} |", p.name));
    }
    o.push_str("\n|---|");
    o.push_str(&"---|".repeat(PROFILES.len()));
    o.push('\n');
    let mut all: Vec<Guarantee> = Vec::new();
    for g in PROFILES.iter().flat_map(|p| p.guarantees) {
        if !all.contains(g) {
            all.push(*g);
        }
    }
    for g in all {
        o.push_str(&format!("| {} |", g.text()));
        for p in PROFILES {
            o.push_str(if p.guarantees.contains(&g) {
                " x |"
            } else {
                "  |"
            });
        }
        o.push('\n');
    }
    o
}

/// The operator's lists beside the built-in path tables (config keys `protected_paths` and
/// `data_paths`; globs relative to the workspace, `**/` for any depth): `protected` adds to
/// `bash::protected`'s built-in rules (git's and the program entries'), `data` to [`DATA`].
/// `bash::protected` decides with them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathLists {
    pub protected: Vec<String>,
    pub data: Vec<String>,
}

/// Tool-written caches and build output: data, not configuration. They lift only the default
/// rule for dot-files (a `.fingerprint` under `target/`, `.pytest_cache/`), never a row of
/// `bash::protected`'s listed rules (git's, the operator's `protected_paths`, what
/// a program entry says the program runs or obeys), so ordinary build and test runs
/// need no human. The operator adds to it with `data_paths`.
pub const DATA: &[&str] = &[
    "**/target/**",
    "**/node_modules/**",
    "**/.venv/**",
    "**/__pycache__/**",
    "**/.pytest_cache/**",
    "**/.mypy_cache/**",
    "**/.ruff_cache/**",
    "**/.tox/**",
    "**/.nox/**",
    "**/.hypothesis/**",
    "**/.coverage",
    "**/.coverage.*",
    "**/.eggs/**",
    "**/.ipynb_checkpoints/**",
    "**/.cache/**",
    "**/.gradle/**",
    "**/.next/**",
    "**/.nuxt/**",
    "**/.svelte-kit/**",
    "**/.parcel-cache/**",
    "**/.turbo/**",
    "**/.nyc_output/**",
    "**/.sass-cache/**",
    "**/.dart_tool/**",
    "**/.yarn/cache/**",
    "**/.pnpm-store/**",
    "**/.eslintcache",
    "**/.stylelintcache",
    "**/.DS_Store",
    "**/.gitignore",
    "**/.gitkeep",
    "**/.keep",
    "**/.dockerignore",
    "**/.npmignore",
    "**/.prettierignore",
    "**/.eslintignore",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_per_set_in_variant_order() {
        for (i, p) in PROFILES.iter().enumerate() {
            assert_eq!(p.set as usize, i, "{}", p.name);
            assert_eq!(parse(p.name), Ok(p.set));
            assert_eq!(p.set.profile().name, p.name);
        }
        assert_eq!(parse("full-access"), Err(UnknownSet("full-access".into())));
        assert!(parse("Minimal").is_err());
    }

    #[test]
    fn every_need_is_covered_by_an_inferred_row() {
        for bits in 0..16u8 {
            let n = Needs {
                read: bits & 1 != 0,
                write: bits & 2 != 0,
                network: bits & 4 != 0,
                other: bits & 8 != 0,
            };
            assert!(PROFILES.iter().any(|p| p.inferred && p.covers(n)), "{n:?}");
        }
    }

    #[test]
    fn seed_002_rules() {
        use PermissionSet::*;
        assert_eq!(smallest(Needs::NONE), Minimal);
        assert_eq!(smallest(Needs::READ), Readonly);
        assert_eq!(smallest(Needs::WRITE), Filesystem);
        assert_eq!(
            smallest(Needs {
                read: true,
                ..Needs::WRITE
            }),
            Filesystem
        );
        assert_eq!(smallest(Needs::NETWORK), NetworkApi);
        assert_eq!(
            smallest(Needs {
                read: true,
                ..Needs::NETWORK
            }),
            McpStandard
        );
        assert_eq!(smallest(Needs::OTHER), McpStandard);
    }

    #[test]
    fn the_rows_agree_with_themselves() {
        for p in PROFILES {
            // A confined set states "no network" exactly when it has none.
            if p.confined {
                assert_eq!(
                    p.guarantees.contains(&Guarantee::NoNetwork),
                    !p.network,
                    "{}",
                    p.name
                );
                assert!(!p.guarantees.is_empty(), "{}", p.name);
            } else {
                assert!(p.guarantees.is_empty() && !p.inferred, "{}", p.name);
            }
            // UNIX sockets only with network (a human granted it); neutralised only without.
            assert!(!p.set.unix_sockets() || p.network, "{}", p.name);
            // INET only where the forwarder is the way out.
            assert_eq!(
                p.socket_families.contains(&SocketFamily::Inet),
                p.network,
                "{}",
                p.name
            );
            assert!(!(p.neutralised && p.network), "{}", p.name);
        }
    }

    #[test]
    fn serde_uses_the_names() {
        let j = serde_json::to_string(&PermissionSet::NetworkApi).unwrap();
        assert_eq!(j, "\"network-api\"");
        let s: PermissionSet = serde_json::from_str("\"mcp-standard\"").unwrap();
        assert_eq!(s, PermissionSet::McpStandard);
        assert!(serde_json::from_str::<PermissionSet>("\"full\"").is_err());
    }
}
