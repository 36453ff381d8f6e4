//! Landlock rules for a [`Spec`]: every filesystem access right is handled (so anything not
//! allowed is denied): read + execute beneath `read`, everything beneath `write`, read + write on
//! the allowed devices. Sets without network also handle TCP bind/connect with no port allowed.
//! Signals and abstract UNIX sockets are scoped to the sandbox (ABI ≥ 6), so a command cannot
//! signal the worker or other processes.

use super::Spec;
use landlock::{
    Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetError, RulesetStatus, Scope, ABI,
};

/// The newest ABI this code was written and tested against.
pub const TARGET_ABI: ABI = ABI::V6;

/// The kernel's Landlock ABI version (0 when unsupported).
pub fn kernel_abi() -> i64 {
    // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
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

/// Applies the rules to the calling process (and what it executes). Returns whether they are
/// fully enforced.
pub fn apply(spec: &Spec) -> Result<bool, String> {
    let abi = TARGET_ABI;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let dev = AccessFs::ReadFile | AccessFs::WriteFile;
    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .map_err(|e| e.to_string())?;
    if !spec.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(|e| e.to_string())?;
    }
    ruleset = ruleset
        .scope(Scope::from_all(abi))
        .map_err(|e| e.to_string())?;
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
    let status = created.restrict_self().map_err(|e| e.to_string())?;
    Ok(status.ruleset == RulesetStatus::FullyEnforced)
}
