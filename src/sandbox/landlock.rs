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
    RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, ABI,
};

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

/// Applies the rules for ABI `level` (≥ 1) to the calling process (and what it executes).
/// Returns whether the kernel enforces every right requested (it does when `level` ≤ the
/// kernel's ABI: the ruleset asks only for rights that ABI has).
pub fn apply(spec: &Spec, level: i64) -> Result<bool, String> {
    let abi = abi_enum(level);
    if abi == ABI::Unsupported {
        return Err("Landlock is unsupported by this kernel (ABI 0)".into());
    }
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let dev = AccessFs::ReadFile | AccessFs::WriteFile;
    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .map_err(|e| e.to_string())?;
    // An empty set of rights is an error for the crate: ask only for what the ABI has.
    let net = AccessNet::from_all(abi);
    if !spec.network && !net.is_empty() {
        ruleset = ruleset.handle_access(net).map_err(|e| e.to_string())?;
    }
    let scope = Scope::from_all(abi);
    if !scope.is_empty() {
        ruleset = ruleset.scope(scope).map_err(|e| e.to_string())?;
    }
    // A path that does not exist (or vanished) is simply not allowed.
    let rules = spec
        .read
        .iter()
        .map(|p| (p, read))
        .chain(spec.write.iter().map(|p| (p, all)))
        .chain(spec.devices.iter().map(|p| (p, dev)))
        .filter_map(|(p, access)| {
            // Directory-only rights on a file would leave the ruleset partially enforced.
            let access = if p.is_dir() {
                access
            } else {
                access & AccessFs::from_file(abi)
            };
            PathFd::new(p)
                .ok()
                .map(|fd| Ok::<_, RulesetError>(PathBeneath::new(fd, access)))
        });
    let created = ruleset
        .create()
        .map_err(|e| e.to_string())?
        .add_rules(rules)
        .map_err(|e| e.to_string())?;
    // A set without network that has the egress proxy (an overlay run) may connect to it.
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
