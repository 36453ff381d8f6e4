//! The seccomp filter: what Landlock cannot express. Denied with EPERM: tracing other processes
//! (`ptrace`, `process_vm_*`), mounting and namespaces (`mount`, `umount2`, the new mount API,
//! `pivot_root`, `unshare`, `setns`, `clone` with any `CLONE_NEW*` flag), kernel keyrings, BPF,
//! perf, module and kexec loading, raw sockets, `userfaultfd`, swap, reboot; and `socket(2)`
//! with any family not in the command's allowlist ([`crate::permset::Profile::socket_families`]:
//! issue 19, a host daemon's UNIX socket is a way out and `connect`'s address is behind a pointer
//! a filter cannot read, so the socket itself is refused; issue 33, `AF_VSOCK` ignores network
//! namespaces and `AF_NETLINK` talks to the kernel; `socketpair` stays for pipes). x32 system
//! call numbers kill the process (`bpf::compile`'s guard: x32 calls are x86_64's with
//! `__X32_SYSCALL_BIT`, under the same audit architecture, so a filter listing x86_64 numbers
//! would let every one through on kernels built with `CONFIG_X86_X32_ABI`).
//! `clone3` gets ENOSYS so libc falls back to `clone`, whose flags the filter can inspect.
//!
//! No privilege bits (issue 18): `chmod`, `fchmod`, `fchmodat`, `fchmodat2` with `S_ISUID` or
//! `S_ISGID` in the mode, and `open`/`openat`/`creat`/`mknod`/`mknodat` creating a file with
//! either bit (`O_CREAT` or `O_TMPFILE` in the flags; the mode argument is read at its index
//! for each call), are refused with EPERM — in every permission set, so neither a direct run
//! nor an overlay run can make a setuid file. Directories are left alone: a setgid directory
//! only makes new files inherit its group, and `mkdir` cannot set the setuid bit.
//! Two calls carry their arguments where a filter cannot look, so they get ENOSYS ("not
//! implemented here"), which every caller must already handle on older kernels: `openat2`
//! (mode inside `struct open_how`; glibc's `open`/`openat` never use it, and programs that do
//! fall back to `openat`) and io_uring (`io_uring_setup`, `_enter`, `_register`: an
//! `IORING_OP_OPENAT` or `IORING_OP_SOCKET` would act with no syscall to filter; io_uring users
//! fall back to plain calls).
//! An overlay run also gets EXDEV for hard links ([`apply_no_hard_links`]).
//!
//! This module owns the table ([`calls`]); `bpf.rs` lays it out as one program, a binary search
//! over call numbers (issue 39). The small filters beside it (the overlay's EXDEV, Landlock's
//! truncate guard below ABI 3) are still seccompiler's ([`install_errno`]).

use super::bpf;
use crate::permset::SocketFamily;
use seccompiler::{
    apply_filter, BpfProgram, SeccompAction, SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

const DENIED: &[i64] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_open_by_handle_at,
    libc::SYS_userfaultfd,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_syslog,
    libc::SYS_quotactl,
];

const NS_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// `__O_TMPFILE` (`O_TMPFILE` without `O_DIRECTORY`), the same on x86_64 and aarch64.
const O_TMPFILE_BIT: u64 = 0o20000000;

/// What the filter does, as a table (`bpf::compile` lays it out as a search tree): the calls
/// denied outright (EPERM), `clone` with a namespace flag, creating or chmod-ing with a
/// privilege bit, sockets outside `families` or raw (EPERM), and the calls whose arguments a
/// filter cannot see (ENOSYS). Every condition reads an argument's low 32 bits, which is all
/// the kernel reads of these: `clone`'s flags (`lower_32_bits(clone_flags)`, every
/// `CLONE_NEW*` among them), a mode (`umode_t`), open flags and a socket's domain and type
/// (`int`).
pub fn calls(families: &[SocketFamily]) -> Vec<bpf::Call> {
    use bpf::{Call, Cond, Rule, Test};
    let eperm = bpf::errno(libc::EPERM);
    let masked = |arg: u8, bits: u64| Cond {
        arg,
        test: Test::MaskedEq {
            mask: bits as u32,
            value: bits as u32,
        },
    };
    let always = |action| {
        vec![Rule {
            conds: vec![],
            action,
        }]
    };
    let mut calls: Vec<Call> = DENIED
        .iter()
        .map(|&nr| Call {
            nr: nr as u32,
            rules: always(eperm),
        })
        .collect();
    calls.push(Call {
        nr: libc::SYS_clone as u32,
        rules: NS_FLAGS
            .iter()
            .map(|&f| Rule {
                conds: vec![masked(0, f)],
                action: eperm,
            })
            .collect(),
    });
    for (nr, mode_arg, flags_arg) in mode_calls() {
        let mut rules = Vec::new();
        for bit in [libc::S_ISUID as u64, libc::S_ISGID as u64] {
            match flags_arg {
                None => rules.push(Rule {
                    conds: vec![masked(mode_arg, bit)],
                    action: eperm,
                }),
                Some(fa) => {
                    for flag in [libc::O_CREAT as u64, O_TMPFILE_BIT] {
                        rules.push(Rule {
                            conds: vec![masked(mode_arg, bit), masked(fa, flag)],
                            action: eperm,
                        });
                    }
                }
            }
        }
        calls.push(Call {
            nr: nr as u32,
            rules,
        });
    }
    let mut socket = Vec::new();
    if families.is_empty() {
        socket.push(Rule {
            conds: vec![],
            action: eperm,
        });
    } else {
        socket.push(Rule {
            conds: families
                .iter()
                .map(|f| Cond {
                    arg: 0,
                    test: Test::Ne(f.domain() as u32),
                })
                .collect(),
            action: eperm,
        });
        // No raw socket in any family: the type's low bits are SOCK_RAW.
        socket.push(Rule {
            conds: vec![Cond {
                arg: 1,
                test: Test::MaskedEq {
                    mask: 0xf,
                    value: libc::SOCK_RAW as u32,
                },
            }],
            action: eperm,
        });
    }
    calls.push(Call {
        nr: libc::SYS_socket as u32,
        rules: socket,
    });
    for nr in ENOSYS {
        calls.push(Call {
            nr: *nr as u32,
            rules: always(bpf::errno(libc::ENOSYS)),
        });
    }
    calls
}

/// The calls that take a mode: (call, index of the mode argument, index of the flags argument
/// when the call creates only with `O_CREAT` / `O_TMPFILE`).
fn mode_calls() -> Vec<(i64, u8, Option<u8>)> {
    let mut v: Vec<(i64, u8, Option<u8>)> = vec![
        (libc::SYS_fchmod, 1, None),
        (libc::SYS_fchmodat, 2, None),
        (libc::SYS_fchmodat2, 2, None),
        (libc::SYS_openat, 3, Some(2)),
        (libc::SYS_mknodat, 2, None),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        (libc::SYS_chmod, 1, None),
        (libc::SYS_creat, 1, None),
        (libc::SYS_open, 2, Some(1)),
        (libc::SYS_mknod, 1, None),
    ]);
    v
}

/// Calls answered ENOSYS ("not implemented here"): `clone3` (libc falls back to `clone`, whose
/// flags the filter can read), `openat2` and io_uring (their arguments are behind pointers).
const ENOSYS: &[i64] = &[
    libc::SYS_clone3,
    libc::SYS_openat2,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
];

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7; // AUDIT_ARCH_AARCH64

/// The whole filter for `families`, one program (x86_64: with the x32 guard).
fn program(families: &[SocketFamily]) -> Result<BpfProgram, String> {
    bpf::compile(AUDIT_ARCH, &calls(families), cfg!(target_arch = "x86_64"))
}

/// Programs compiled ahead by a warm helper ([`prepare_all`]), by socket families.
static PREPARED: std::sync::Mutex<Vec<(Vec<SocketFamily>, BpfProgram)>> =
    std::sync::Mutex::new(Vec::new());

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Compiles, ahead of any spec, the programs of every allowlist a command can get (each set's
/// families, and each with the egress forwarder's `AF_INET`/`AF_INET6`): a warm helper does it
/// before it waits for its spec, so [`apply`] only installs them (issue 39). The programs are
/// the very ones [`apply`] would compile, from the same function.
pub fn prepare_all() {
    let mut lists: Vec<Vec<SocketFamily>> = Vec::new();
    for set in crate::permset::PermissionSet::all() {
        let mut f = set.socket_families().to_vec();
        f.sort();
        f.dedup();
        let mut with = f.clone();
        with.extend([SocketFamily::Inet, SocketFamily::Inet6]);
        with.sort();
        with.dedup();
        for l in [f, with] {
            if !lists.contains(&l) {
                lists.push(l);
            }
        }
    }
    let compiled: Vec<(Vec<SocketFamily>, BpfProgram)> = lists
        .into_iter()
        .filter_map(|l| program(&l).ok().map(|p| (l, p)))
        .collect();
    *lock(&PREPARED) = compiled;
}

/// Installs the filter on the calling thread (inherited across fork and exec). Requires
/// `no_new_privs`, which the helper sets first. `families`: the socket families the command
/// may create (`super::socket_families`).
pub fn apply(families: &[SocketFamily]) -> Result<(), String> {
    let ready = lock(&PREPARED)
        .iter()
        .find(|(f, _)| f == families)
        .map(|(_, p)| p.clone());
    let prog = match ready {
        Some(p) => p,
        None => program(families)?,
    };
    apply_filter(&prog).map_err(|e| e.to_string())
}

/// An overlay run's hard links (issue 35): `link`/`linkat` fail with EXDEV, as between two
/// file systems. A change set records paths and contents, never that two paths share an
/// inode, so a link made on the overlay could not be applied as one; and overlayfs copies a
/// lower file up on `link`, giving it another inode, which `git clone` of a local path checks
/// and dies on ("hardlink different from source"). Programs already treat EXDEV as "copy
/// instead" (git clone, cargo, pnpm); `ln` without `-s` reports it.
pub fn apply_no_hard_links() -> Result<(), String> {
    let mut calls = vec![(libc::SYS_linkat, Vec::new())];
    #[cfg(target_arch = "x86_64")]
    calls.push((libc::SYS_link, Vec::new()));
    install_errno(calls.into_iter().collect(), libc::EXDEV)
}

/// Compiles and installs on the calling thread a filter failing the calls `rules` match with
/// `errno` (every other call allowed): the small filters beside the main ones.
pub fn install_errno(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<(), String> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        ARCH,
    )
    .map_err(|e| e.to_string())?;
    let prog: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    apply_filter(&prog).map_err(|e| e.to_string())
}

/// Whether the kernel supports seccomp filters.
pub fn available() -> bool {
    // PR_GET_SECCOMP succeeds (0 = disabled for us) when seccomp is built in.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

/// The filter as it was before `bpf.rs`: seccompiler's linear programs (the main one and the
/// ENOSYS one, every condition on the whole 64-bit argument) and the hand-written x32 guard,
/// installed as three filters. The oracle of the differential test below: the one program must
/// give, for every call number and many argument values, the action the kernel gave for the
/// three (the most severe action of the filters wins).
#[cfg(test)]
mod oracle {
    use super::*;
    use seccompiler::{sock_filter, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition};

    fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
        SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value).map_err(|e| e.to_string())
    }

    /// The filter as seccompiler compiled it before `bpf.rs` (two programs, plus [`x32_guard`]):
    /// the oracle of the differential test.
    fn reference(families: &[SocketFamily]) -> Result<(BpfProgram, BpfProgram), String> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
            DENIED.iter().map(|&s| (s, Vec::new())).collect();
        // clone(flags, ...): deny when any namespace flag is set (one rule per flag: any matches).
        let mut clone_rules = Vec::new();
        for &f in NS_FLAGS {
            clone_rules.push(
                SeccompRule::new(vec![cond(0, SeccompCmpOp::MaskedEq(f), f)?])
                    .map_err(|e| e.to_string())?,
            );
        }
        rules.insert(libc::SYS_clone, clone_rules);
        // No setuid/setgid files: (syscall, index of the mode argument, index of the flags
        // argument when the call creates only with O_CREAT / O_TMPFILE).
        let mut mode_calls: Vec<(i64, u8, Option<u8>)> = vec![
            (libc::SYS_fchmod, 1, None),
            (libc::SYS_fchmodat, 2, None),
            (libc::SYS_fchmodat2, 2, None),
            (libc::SYS_openat, 3, Some(2)),
            (libc::SYS_mknodat, 2, None),
        ];
        #[cfg(target_arch = "x86_64")]
        mode_calls.extend([
            (libc::SYS_chmod, 1, None),
            (libc::SYS_creat, 1, None),
            (libc::SYS_open, 2, Some(1)),
            (libc::SYS_mknod, 1, None),
        ]);
        for (nr, mode_arg, flags_arg) in mode_calls {
            let mut v = Vec::new();
            for bit in [libc::S_ISUID as u64, libc::S_ISGID as u64] {
                let creating: Vec<Option<u64>> = match flags_arg {
                    None => vec![None],
                    Some(_) => vec![Some(libc::O_CREAT as u64), Some(O_TMPFILE_BIT)],
                };
                for c in creating {
                    let mut conds = vec![cond(mode_arg, SeccompCmpOp::MaskedEq(bit), bit)?];
                    if let (Some(fa), Some(flag)) = (flags_arg, c) {
                        conds.push(cond(fa, SeccompCmpOp::MaskedEq(flag), flag)?);
                    }
                    v.push(SeccompRule::new(conds).map_err(|e| e.to_string())?);
                }
            }
            rules.insert(nr, v);
        }
        rules.insert(libc::SYS_socket, socket_rules(families)?);
        let deny = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            ARCH,
        )
        .map_err(|e| e.to_string())?;
        let clone3 = SeccompFilter::new(
            [
                (libc::SYS_clone3, Vec::new()),
                (libc::SYS_openat2, Vec::new()),
                (libc::SYS_io_uring_setup, Vec::new()),
                (libc::SYS_io_uring_enter, Vec::new()),
                (libc::SYS_io_uring_register, Vec::new()),
            ]
            .into_iter()
            .collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            ARCH,
        )
        .map_err(|e| e.to_string())?;
        Ok((
            deny.try_into()
                .map_err(|e: seccompiler::BackendError| e.to_string())?,
            clone3
                .try_into()
                .map_err(|e: seccompiler::BackendError| e.to_string())?,
        ))
    }

    /// `socket(domain, type, ...)`: the families of the allowlist only (one rule: the domain is none
    /// of them, compared as the kernel reads it, a 32-bit int), and no raw sockets in any of them;
    /// with an empty allowlist every `socket` is refused. `socketpair`, for pipes between
    /// processes, is another call and stays.
    fn socket_rules(families: &[SocketFamily]) -> Result<Vec<SeccompRule>, String> {
        if families.is_empty() {
            return Ok(Vec::new()); // an empty rule list matches every call
        }
        let mut not_allowed = Vec::new();
        for f in families {
            not_allowed.push(
                SeccompCondition::new(
                    0,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Ne,
                    f.domain() as u64,
                )
                .map_err(|e| e.to_string())?,
            );
        }
        Ok(vec![
            SeccompRule::new(not_allowed).map_err(|e| e.to_string())?,
            SeccompRule::new(vec![cond(
                1,
                SeccompCmpOp::MaskedEq(0xf),
                libc::SOCK_RAW as u64,
            )?])
            .map_err(|e| e.to_string())?,
        ])
    }

    /// `__X32_SYSCALL_BIT`: x32 system calls are x86_64's with this bit set, under the same audit
    /// architecture, so a filter that lists x86_64 numbers (seccompiler's) lets every one of them
    /// through. Kernels built with `CONFIG_X86_X32_ABI` (some distributions') run them.
    #[cfg(target_arch = "x86_64")]
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;

    /// The x32 guard: kills the process on any system call number with [`X32_SYSCALL_BIT`] — the
    /// sandbox's commands are x86_64 programs, and one making x32 calls is trying the filter's
    /// blind spot. Hand-written because seccompiler cannot compare the call number itself (only
    /// match it exactly); the architecture was already checked by the other filters (any other
    /// audit architecture, i386's `int 0x80` included, is killed there).
    #[cfg(target_arch = "x86_64")]
    fn x32_guard() -> BpfProgram {
        const LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
        const JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
        const RET_K: u16 = 0x06; // BPF_RET | BPF_K
        let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
        vec![
            ins(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
            ins(JGE_K, 0, 1, X32_SYSCALL_BIT),
            ins(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
            ins(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        ]
    }

    fn severity(action: u32) -> u32 {
        match action & 0xffff_0000 {
            bpf::KILL_PROCESS => 3,
            0x0005_0000 => 2,
            bpf::ALLOW => 1,
            other => panic!("unexpected action {other:#x}"),
        }
    }

    /// The three old filters' verdict: the most severe action wins.
    fn old_verdict(progs: &[&BpfProgram], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        progs
            .iter()
            .map(|p| bpf::run(p, nr, arch, args))
            .max_by_key(|&a| severity(a))
            .unwrap_or(bpf::ALLOW)
    }

    /// Argument values that matter to some rule, and others: each privilege bit and creating
    /// flag alone and together, each namespace flag, every socket domain and type, high words
    /// set, all bits set.
    fn values() -> Vec<u64> {
        let mut v: Vec<u64> = vec![0, 1, 2, 3, 10, 16, 17, 40, 44, u32::MAX as u64, u64::MAX];
        let bits = [
            libc::S_ISUID as u64,
            libc::S_ISGID as u64,
            0o777,
            libc::O_CREAT as u64,
            O_TMPFILE_BIT,
            libc::O_DIRECTORY as u64,
            libc::O_TRUNC as u64,
            libc::SOCK_RAW as u64,
            libc::SOCK_STREAM as u64,
            libc::SOCK_DGRAM as u64,
            libc::SOCK_CLOEXEC as u64,
        ];
        v.extend(bits);
        v.extend(NS_FLAGS);
        for &a in &bits {
            for &b in &bits {
                v.push(a | b);
            }
        }
        for x in v.clone() {
            v.push(x | (0xdead_beef << 32));
        }
        v.push(libc::SOCK_RAW as u64 | libc::SOCK_NONBLOCK as u64);
        v.push(libc::CLONE_NEWUSER as u64 | libc::CLONE_VM as u64 | 0x11);
        v.sort();
        v.dedup();
        v
    }

    /// Every call number 0–1023 (and x32 numbers, and other architectures) with argument
    /// vectors built from [`values`], for every socket-family list a command can get.
    #[test]
    fn the_search_tree_decides_exactly_as_the_three_linear_filters() {
        let vals = values();
        let mut lists: Vec<Vec<SocketFamily>> = vec![vec![]];
        for set in crate::permset::PermissionSet::all() {
            let mut f = set.socket_families().to_vec();
            lists.push(f.clone());
            f.extend([SocketFamily::Inet, SocketFamily::Inet6]);
            lists.push(f);
        }
        let mut checked = 0u64;
        for fam in &lists {
            let new = program(fam).expect("compiles");
            let (deny, enosys) = reference(fam).expect("the oracle compiles");
            #[cfg(target_arch = "x86_64")]
            let x32 = x32_guard();
            #[cfg(target_arch = "x86_64")]
            let old: Vec<&BpfProgram> = vec![&deny, &enosys, &x32];
            #[cfg(not(target_arch = "x86_64"))]
            let old: Vec<&BpfProgram> = vec![&deny, &enosys];
            let mut nrs: Vec<u32> = (0..1024).collect();
            nrs.extend([bpf::X32_SYSCALL_BIT, bpf::X32_SYSCALL_BIT | 59, u32::MAX]);
            for nr in nrs {
                for arch in [AUDIT_ARCH, 0x4000_0003, 0] {
                    // Each argument position takes each value, the others a fixed pattern.
                    for pos in 0..6 {
                        for &x in &vals {
                            for base in [0u64, libc::S_ISUID as u64 | libc::O_CREAT as u64] {
                                let mut args = [base; 6];
                                args[pos] = x;
                                let (o, n) = (
                                    old_verdict(&old, nr, arch, args),
                                    bpf::run(&new, nr, arch, args),
                                );
                                assert_eq!(
                                    o, n,
                                    "nr {nr} arch {arch:#x} args {args:?} families {fam:?}"
                                );
                                checked += 1;
                            }
                        }
                    }
                }
            }
            assert!(new.len() < deny.len(), "{} ≥ {}", new.len(), deny.len());
        }
        assert!(checked > 1_000_000, "{checked}");
    }

    /// Mode and flags in the two argument positions at once (the rules with two conditions).
    #[test]
    fn two_condition_rules_agree_on_every_pair() {
        let vals = values();
        let fam = crate::permset::PermissionSet::Readonly
            .socket_families()
            .to_vec();
        let new = program(&fam).expect("compiles");
        let (deny, enosys) = reference(&fam).expect("the oracle compiles");
        let old: Vec<&BpfProgram> = vec![&deny, &enosys];
        for (nr, mode, flags) in mode_calls() {
            for &m in &vals {
                for &f in &vals {
                    let mut args = [0u64; 6];
                    args[mode as usize] = m;
                    if let Some(fa) = flags {
                        args[fa as usize] = f;
                    }
                    assert_eq!(
                        old_verdict(&old, nr as u32, AUDIT_ARCH, args),
                        bpf::run(&new, nr as u32, AUDIT_ARCH, args),
                        "nr {nr} args {args:?}"
                    );
                }
            }
        }
    }
}
