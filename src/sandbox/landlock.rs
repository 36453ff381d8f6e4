//! Landlock rules for a [`Spec`], built for the Landlock ABI this kernel offers (graded
//! confinement, issue 20): every filesystem access right *that ABI knows* is handled (so anything
//! not allowed is denied): read + execute beneath `read`, everything beneath `write`, read + write
//! on the allowed devices. By ABI: 1 files (and every cross-directory rename/link refused), 2 adds
//! REFER (renames between roots checked instead of refused), 3 TRUNCATE, 4 TCP bind/connect
//! (handled with no port allowed for sets without network), 5 IOCTL_DEV, 6 signal and abstract
//! UNIX socket scoping. What each level guarantees per permission set, and which other mechanism
//! covers a right an older ABI lacks, is stated in `guarantees.rs`; below ABI 3 this file also
//! owns the seccomp *truncate guard* that stands in for TRUNCATE.
//!
//! The ABI used is [`effective_abi`]: the kernel's, or lower when the test-only override
//! `BRAINLOOP_TEST_LANDLOCK_ABI` asks for it (it can only lower the level, never raise it, and
//! everything reported — the guarantee table, the result's `sandbox` label — uses the lowered
//! level).

use super::Spec;
use landlock::{
    Access, AccessFs, AccessNet, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, ABI,
};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::Mutex;

/// The newest ABI this code was written and tested against (newer kernels are used at this
/// level).
pub const TARGET_ABI: i64 = 6;

/// The test-only override: build the ruleset as if the kernel had at most this ABI.
pub const ABI_OVERRIDE_ENV: &str = "BRAINLOOP_TEST_LANDLOCK_ABI";

/// The kernel's Landlock ABI version (0 when unsupported).
pub fn kernel_abi() -> i64 {
    // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // SAFETY: a query with a null attribute pointer and size 0, as documented for VERSION.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    if r < 0 {
        0
    } else {
        r as i64
    }
}

/// The ABI the sandbox builds its rules for: the kernel's, capped at [`TARGET_ABI`], lowered
/// (never raised) by `BRAINLOOP_TEST_LANDLOCK_ABI`.
pub fn effective_abi() -> i64 {
    let k = kernel_abi().min(TARGET_ABI);
    match std::env::var(ABI_OVERRIDE_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
    {
        Some(o) if o >= 0 => k.min(o),
        _ => k,
    }
}

/// Whether the override lowered the level (shown in `brainloop sandbox` and logged at start).
pub fn overridden() -> Option<i64> {
    let e = effective_abi();
    (e < kernel_abi().min(TARGET_ABI)).then_some(e)
}

fn abi_enum(n: i64) -> ABI {
    match n {
        ..=0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        _ => ABI::V6,
    }
}

/// The ABI the helper applies for `spec`: what the worker asked for, never above the kernel's.
pub fn helper_abi(spec: &Spec) -> i64 {
    let k = kernel_abi().min(TARGET_ABI);
    spec.landlock_abi.map_or(k, |a| a.clamp(0, k))
}

/// A path opened `O_PATH` for a rule, and whether it is a directory (of the opened file, so
/// the two cannot disagree).
struct Opened {
    fd: PathFd,
    dir: bool,
}

fn open(p: &PathBuf) -> Option<Opened> {
    let fd = PathFd::new(p).ok()?;
    let dir = is_dir(fd.as_fd())?;
    Some(Opened { fd, dir })
}

fn is_dir(fd: BorrowedFd<'_>) -> Option<bool> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `struct stat` into the buffer given; read only when it succeeded.
    let ok = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } == 0;
    // SAFETY: initialised by the successful fstat above.
    ok.then(|| unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// What a rule grants beneath its path: read + execute, everything, or read + write of a
/// device node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Read,
    Write,
    Device,
}

/// The rights of a rule of `class` on a path (directory or not) at ABI `abi`.
fn rights(class: Class, dir: bool, abi: ABI) -> landlock::BitFlags<AccessFs> {
    let access = match class {
        Class::Read => AccessFs::from_read(abi),
        Class::Write => AccessFs::from_all(abi),
        Class::Device => AccessFs::ReadFile | AccessFs::WriteFile,
    };
    // Directory-only rights on a file would leave the ruleset partially enforced.
    if dir {
        access
    } else {
        access & AccessFs::from_file(abi)
    }
}

/// A ruleset created with what it handles for ABI `level` and a spec with or without network:
/// every filesystem right, the TCP rights unless the set has network, every scope.
fn created(level: i64, network: bool) -> Result<RulesetCreated, String> {
    let abi = abi_enum(level);
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| e.to_string())?;
    // An empty set of rights is an error for the crate: ask only for what the ABI has.
    let net = AccessNet::from_all(abi);
    if !network && !net.is_empty() {
        ruleset = ruleset.handle_access(net).map_err(|e| e.to_string())?;
    }
    let scope = Scope::from_all(abi);
    if !scope.is_empty() {
        ruleset = ruleset.scope(scope).map_err(|e| e.to_string())?;
    }
    ruleset.create().map_err(|e| e.to_string())
}

/// Adds a rule per opened path; a path that does not exist (or vanished) is simply not allowed.
fn add(
    created: RulesetCreated,
    paths: &[(PathBuf, Class)],
    abi: ABI,
) -> Result<RulesetCreated, String> {
    let opened: Vec<(Opened, Class)> = paths
        .iter()
        .filter_map(|(p, c)| open(p).map(|o| (o, *c)))
        .collect();
    let rules = opened.iter().map(|(o, c)| {
        Ok::<_, RulesetError>(PathBeneath::new(o.fd.as_fd(), rights(*c, o.dir, abi)))
    });
    created.add_rules(rules).map_err(|e| e.to_string())
}

/// A ruleset a warm helper built before its spec (issue 39: opening the paths and adding their
/// rules was most of the Landlock step): created for ABI `level` with or without network, and
/// holding the rules of `holds` — the system directories and device nodes every set reads or
/// uses (`super::SYSTEM_DIRS`, the directories among `super::ETC_ENTRIES`, the CPU topology,
/// `super::DEVICES`). None is beneath a directory the helper covers with a tmpfs
/// (`super::HIDDEN_DIRS`) or `/proc` (mounted afresh), and none is a regular file: `/etc`'s
/// files, which package upgrades replace by renaming (a rule holds an inode), are opened per
/// command. What is mounted on top later (the nosuid binds, the overlay) changes nothing: a
/// rule holds an inode. Used only by a spec that asks for every rule it holds (a ruleset never
/// grants what its spec did not ask for), once.
struct Prepared {
    level: i64,
    network: bool,
    created: RulesetCreated,
    holds: Vec<(PathBuf, Class)>,
}

static AHEAD: Mutex<Vec<Prepared>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The rules a ruleset may hold before its spec: see [`Prepared`].
fn fixed() -> Vec<(PathBuf, Class)> {
    let read = super::SYSTEM_DIRS
        .iter()
        .chain(super::ETC_ENTRIES)
        .chain(["/sys/devices/system/cpu"].iter())
        .map(|p| (PathBuf::from(p), Class::Read));
    let dev = super::DEVICES
        .iter()
        .map(|p| (PathBuf::from(p), Class::Device));
    read.chain(dev)
        .filter(|(p, _)| {
            !super::HIDDEN_DIRS
                .iter()
                .chain(["/proc"].iter())
                .any(|h| p.starts_with(h))
        })
        .filter(|(p, c)| match std::fs::metadata(p) {
            Ok(m) if *c == Class::Device => m.file_type().is_char_device(),
            Ok(m) => m.is_dir(),
            Err(_) => false,
        })
        .collect()
}

/// In a warm helper, before its spec: the rulesets of the kernel's ABI, with and without
/// network, holding [`fixed`]'s rules.
pub fn prepare_ahead() {
    let level = effective_abi();
    if level < 1 {
        return;
    }
    let holds = fixed();
    let prepared: Vec<Prepared> = [false, true]
        .into_iter()
        .filter_map(|network| {
            let c = created(level, network).ok()?;
            let c = add(c, &holds, abi_enum(level)).ok()?;
            Some(Prepared {
                level,
                network,
                created: c,
                holds: holds.clone(),
            })
        })
        .collect();
    *lock(&AHEAD) = prepared;
}

/// The ruleset prepared for `level` and `network` whose rules `wanted` all asks for, with the
/// rules left to add; else a new ruleset and every rule.
fn start(
    level: i64,
    network: bool,
    wanted: Vec<(PathBuf, Class)>,
) -> Result<(RulesetCreated, Vec<(PathBuf, Class)>), String> {
    let mut ahead = lock(&AHEAD);
    let at = ahead.iter().position(|p| {
        p.level == level && p.network == network && p.holds.iter().all(|h| wanted.contains(h))
    });
    match at {
        Some(i) => {
            let p = ahead.swap_remove(i);
            let rest = wanted
                .into_iter()
                .filter(|w| !p.holds.contains(w))
                .collect();
            Ok((p.created, rest))
        }
        None => Ok((created(level, network)?, wanted)),
    }
}

/// Applies the rules for ABI `level` (≥ 1) to the calling process (and what it executes).
/// Returns whether the kernel enforces every right requested (it does when `level` ≤ the
/// kernel's ABI: the ruleset asks only for rights that ABI has).
pub fn apply(spec: &Spec, level: i64) -> Result<bool, String> {
    let abi = abi_enum(level);
    if abi == ABI::Unsupported {
        return Err("Landlock is unsupported by this kernel (ABI 0)".into());
    }
    let wanted: Vec<(PathBuf, Class)> = spec
        .read
        .iter()
        .map(|p| (p.clone(), Class::Read))
        .chain(spec.write.iter().map(|p| (p.clone(), Class::Write)))
        .chain(spec.devices.iter().map(|p| (p.clone(), Class::Device)))
        .collect();
    let (created, rest) = start(level, spec.network, wanted)?;
    let created = add(created, &rest, abi)?;
    // A set without network that has the egress proxy (an overlay run) may connect to it.
    let net = AccessNet::from_all(abi);
    let created = match &spec.egress {
        Some(e) if !spec.network && net.contains(AccessNet::ConnectTcp) => created
            .add_rule(NetPort::new(e.port, AccessNet::ConnectTcp))
            .map_err(|e| e.to_string())?,
        _ => created,
    };
    let status = created.restrict_self().map_err(|e| e.to_string())?;
    Ok(status.ruleset == RulesetStatus::FullyEnforced)
}

/// The truncate guard, for Landlock ABI < 3 (no TRUNCATE right): a seccomp filter refusing
/// with EPERM `truncate(2)` (by path, whatever the file) and `open`/`openat` with `O_TRUNC` on
/// a read-only open (`O_RDONLY|O_TRUNC`, which truncates without Landlock's write check).
/// `ftruncate` needs a descriptor opened for writing, which Landlock ABI 1 already checks;
/// `openat2` already gets ENOSYS from the main filter. Cost: `truncate FILE` fails even on a
/// writable file (programs use `open(O_WRONLY|O_TRUNC)` or `ftruncate`, which work).
pub fn truncate_guard() -> Result<(), String> {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    let mask = (libc::O_ACCMODE | libc::O_TRUNC) as u64;
    let ro_trunc = |arg: u8| -> Result<SeccompRule, String> {
        let c = SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(mask),
            libc::O_TRUNC as u64,
        )
        .map_err(|e| e.to_string())?;
        SeccompRule::new(vec![c]).map_err(|e| e.to_string())
    };
    let mut rules = std::collections::BTreeMap::new();
    rules.insert(libc::SYS_truncate, Vec::new());
    #[cfg(target_arch = "x86_64")]
    rules.insert(libc::SYS_open, vec![ro_trunc(1)?]);
    rules.insert(libc::SYS_openat, vec![ro_trunc(2)?]);
    super::seccomp::install_errno(rules, libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ruleset built ahead holds only directories and device nodes, and goes only to a spec
    /// that asks for every rule in it; the spec's other rules are left to add.
    #[test]
    fn a_ruleset_built_ahead_goes_only_to_a_spec_asking_for_all_it_holds_needs_landlock() {
        let level = effective_abi();
        assert!(
            level >= 1,
            "this kernel has no Landlock: the test cannot run here"
        );
        let holds = fixed();
        assert!(holds.contains(&(PathBuf::from("/usr"), Class::Read)));
        assert!(holds.contains(&(PathBuf::from("/dev/null"), Class::Device)));
        assert!(
            !holds
                .iter()
                .any(|(p, _)| p == &PathBuf::from("/etc/passwd")),
            "a regular file an upgrade may replace is opened per command"
        );
        assert!(!holds
            .iter()
            .any(|(p, _)| p.starts_with("/tmp") || p.starts_with("/proc")));
        prepare_ahead();
        assert_eq!(lock(&AHEAD).len(), 2, "with and without network");
        let mut wanted = holds.clone();
        wanted.push((PathBuf::from("/etc/passwd"), Class::Read));
        wanted.push((PathBuf::from("/tmp/ws"), Class::Write));
        // Missing one rule it holds: not this ruleset (it would grant more than asked).
        let short: Vec<_> = wanted.iter().skip(1).cloned().collect();
        let (_, rest) = start(level, false, short.clone()).unwrap();
        assert_eq!(rest, short, "a fresh ruleset, every rule to add");
        assert_eq!(lock(&AHEAD).len(), 2, "the prepared ones untouched");
        // Another ABI: not this ruleset either.
        let (_, rest) = start(level + 1, false, wanted.clone()).unwrap();
        assert_eq!(rest, wanted);
        // Everything it holds asked for: taken once, only the rest left to add.
        let (_, rest) = start(level, false, wanted.clone()).unwrap();
        assert_eq!(
            rest,
            vec![
                (PathBuf::from("/etc/passwd"), Class::Read),
                (PathBuf::from("/tmp/ws"), Class::Write)
            ]
        );
        assert_eq!(lock(&AHEAD).len(), 1, "single use");
        assert!(lock(&AHEAD).iter().all(|p| p.network));
    }
}
