//! A seccomp program as a **binary search over system call numbers** (issue 39): this module
//! owns turning the filter's table (`seccomp::calls`: which call, under which argument
//! conditions, gets which action) into classic BPF. seccompiler, which `seccomp.rs` used alone
//! before, lays the calls out as one linear chain; the kernel walks that chain at install time
//! once per system call number (its action cache, `seccomp_cache_prepare`: ~450 numbers × the
//! whole chain for every call the filter does not list), which made installing the filter the
//! largest single step of a command's confinement (0.19 ms of 515 instructions). A search tree
//! walks ~log₂(n) comparisons instead. seccompiler stays the oracle: the tests run both
//! programs through a BPF interpreter over every call number and many argument values and
//! require the same action.
//!
//! The layout: the architecture check (any other audit architecture, i386's `int 0x80`
//! included, kills the process), the call number, on x86_64 the x32 guard (any number with
//! `__X32_SYSCALL_BIT` kills), then the tree. A node is `jge MID` to the right half through a
//! `ja` (conditional jumps reach 255 instructions at most, `ja` any distance), the left half
//! right after; a leaf of at most [`LEAF`] calls compares each number in turn; every block ends
//! in a `ret`, so no path falls from one block into another. A call's rules are tried in order,
//! the first whose conditions all hold gives its action; none: allowed. Conditions read the
//! low 32 bits of an argument (little-endian: the word at the argument's offset), which is all
//! the kernel reads of every argument the filter inspects (`seccomp::cond`).

use seccompiler::sock_filter;

/// `SECCOMP_RET_ALLOW`.
pub const ALLOW: u32 = 0x7fff_0000;
/// `SECCOMP_RET_KILL_PROCESS`.
pub const KILL_PROCESS: u32 = 0x8000_0000;

/// `SECCOMP_RET_ERRNO` with `errno`.
pub fn errno(e: i32) -> u32 {
    0x0005_0000 | (e as u32 & 0xffff)
}

/// A test of the low 32 bits of argument `arg` (0–5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// `(arg & mask) == value`.
    MaskedEq { mask: u32, value: u32 },
    /// `arg != value`.
    Ne(u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub arg: u8,
    pub test: Test,
}

/// All conditions hold (none: always) → `action`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub conds: Vec<Cond>,
    pub action: u32,
}

/// One system call's rules, tried in order; none matching: allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub nr: u32,
    pub rules: Vec<Rule>,
}

/// Calls compared one by one below this many (a tree node costs two instructions).
const LEAF: usize = 3;

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JA: u16 = 0x05;
const AND_K: u16 = 0x54;
const RET_K: u16 = 0x06;
/// `__X32_SYSCALL_BIT`.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARGS: u32 = 16;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn short(n: usize, what: &str) -> Result<u8, String> {
    u8::try_from(n).map_err(|_| format!("seccomp program: {what} jumps {n} instructions (> 255)"))
}

/// The program for audit architecture `arch`; `x32`: kill x32 call numbers. Calls must have
/// distinct numbers below [`X32_SYSCALL_BIT`].
pub fn compile(arch: u32, calls: &[Call], x32: bool) -> Result<Vec<sock_filter>, String> {
    let mut sorted: Vec<&Call> = calls.iter().collect();
    sorted.sort_by_key(|c| c.nr);
    if sorted.windows(2).any(|w| w[0].nr == w[1].nr) {
        return Err("seccomp program: a call listed twice".into());
    }
    if sorted.iter().any(|c| c.nr >= X32_SYSCALL_BIT) {
        return Err("seccomp program: a call number with the x32 bit".into());
    }
    let mut p = vec![
        ins(LD_W_ABS, 0, 0, ARCH),
        ins(JEQ_K, 1, 0, arch),
        ins(RET_K, 0, 0, KILL_PROCESS),
        ins(LD_W_ABS, 0, 0, NR),
    ];
    if x32 {
        p.push(ins(JGE_K, 0, 1, X32_SYSCALL_BIT));
        p.push(ins(RET_K, 0, 0, KILL_PROCESS));
    }
    p.extend(tree(&sorted)?);
    if p.len() > 4096 {
        return Err(format!(
            "seccomp program of {} instructions (> 4096)",
            p.len()
        ));
    }
    Ok(p)
}

/// The search over `calls` (sorted), with the call number in the accumulator; ends in `ret`s.
fn tree(calls: &[&Call]) -> Result<Vec<sock_filter>, String> {
    if calls.len() <= LEAF {
        return leaf(calls);
    }
    let mid = calls.len() / 2;
    let left = tree(&calls[..mid])?;
    let right = tree(&calls[mid..])?;
    let mut p = vec![
        // ≥ the middle number: the `ja` over the left half; else skip the `ja`.
        ins(JGE_K, 0, 1, calls[mid].nr),
        ins(JA, 0, 0, left.len() as u32),
    ];
    p.extend(left);
    p.extend(right);
    Ok(p)
}

/// `calls` compared in turn; a number none of them has is allowed.
fn leaf(calls: &[&Call]) -> Result<Vec<sock_filter>, String> {
    let mut p = Vec::new();
    for c in calls {
        let body = rules(&c.rules)?;
        p.push(ins(JEQ_K, 0, short(body.len(), "a call's rules")?, c.nr));
        p.extend(body);
    }
    p.push(ins(RET_K, 0, 0, ALLOW));
    Ok(p)
}

/// A call's rules; ends in `ret` (allowed when none matches). The accumulator is overwritten.
fn rules(rules: &[Rule]) -> Result<Vec<sock_filter>, String> {
    let mut p = Vec::new();
    for r in rules {
        let block = rule(r)?;
        let always = r.conds.is_empty();
        p.extend(block);
        if always {
            return Ok(p); // the rules after an unconditional one are never reached
        }
    }
    p.push(ins(RET_K, 0, 0, ALLOW));
    Ok(p)
}

/// One rule: each condition either goes on or jumps past the rule's final `ret` (to the next
/// rule); all holding reach `ret action`.
fn rule(r: &Rule) -> Result<Vec<sock_filter>, String> {
    let mut p = Vec::new();
    // The instructions of each condition after its jump: known once laid out, so build the
    // conditions back to front and count what lies between each jump and the rule's end.
    let mut tail: Vec<sock_filter> = vec![ins(RET_K, 0, 0, r.action)];
    for c in r.conds.iter().rev() {
        if c.arg > 5 {
            return Err(format!("seccomp program: argument {} (0–5)", c.arg));
        }
        let load = ins(LD_W_ABS, 0, 0, ARGS + 8 * c.arg as u32);
        // From the jump, the next rule starts `tail.len()` instructions after the next one.
        let past = short(tail.len(), "a rule")?;
        let mut block = vec![load];
        match c.test {
            Test::MaskedEq { mask, value } => {
                block.push(ins(AND_K, 0, 0, mask));
                block.push(ins(JEQ_K, 0, past, value));
            }
            Test::Ne(v) => block.push(ins(JEQ_K, past, 0, v)),
        }
        block.extend(tail);
        tail = block;
    }
    p.extend(tail);
    Ok(p)
}

/// Runs `prog` on one `seccomp_data` (tests and the differential check): the action.
#[cfg(test)]
pub fn run(prog: &[sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
    let word = |off: u32| -> u32 {
        match off {
            NR => nr,
            ARCH => arch,
            8 | 12 => 0,
            o if (ARGS..ARGS + 48).contains(&o) && o % 4 == 0 => {
                let a = args[((o - ARGS) / 8) as usize];
                if (o - ARGS) % 8 == 0 {
                    a as u32
                } else {
                    (a >> 32) as u32
                }
            }
            o => panic!("load of seccomp_data offset {o}"),
        }
    };
    let (mut pc, mut acc) = (0usize, 0u32);
    loop {
        let i = &prog[pc];
        let jump = |cond: bool| pc + 1 + if cond { i.jt } else { i.jf } as usize;
        pc = match i.code {
            LD_W_ABS => {
                acc = word(i.k);
                pc + 1
            }
            AND_K => {
                acc &= i.k;
                pc + 1
            }
            JEQ_K => jump(acc == i.k),
            JGE_K => jump(acc >= i.k),
            0x25 => jump(acc > i.k),      // JGT
            0x45 => jump(acc & i.k != 0), // JSET
            JA => pc + 1 + i.k as usize,
            RET_K => return i.k,
            c => panic!("opcode {c:#x} at {pc}"),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86_64: u32 = 0xc000_003e;

    fn call(nr: u32, rules: Vec<Rule>) -> Call {
        Call { nr, rules }
    }

    fn always(action: u32) -> Rule {
        Rule {
            conds: vec![],
            action,
        }
    }

    #[test]
    fn a_tree_finds_every_listed_number_and_allows_the_rest() {
        let calls: Vec<Call> = (0..40)
            .map(|i| call(i * 7 + 3, vec![always(errno(i as i32 + 1))]))
            .collect();
        let p = compile(X86_64, &calls, true).unwrap();
        for nr in 0..400u32 {
            let want = if nr >= 3 && (nr - 3) % 7 == 0 && (nr - 3) / 7 < 40 {
                errno(((nr - 3) / 7) as i32 + 1)
            } else {
                ALLOW
            };
            assert_eq!(run(&p, nr, X86_64, [0; 6]), want, "nr {nr}");
        }
        assert_eq!(run(&p, 3 | X32_SYSCALL_BIT, X86_64, [0; 6]), KILL_PROCESS);
        assert_eq!(run(&p, 3, 0x4000_0003, [0; 6]), KILL_PROCESS, "i386");
    }

    #[test]
    fn conditions_read_the_low_word_and_fall_to_the_next_rule() {
        let rules = vec![
            Rule {
                conds: vec![
                    Cond {
                        arg: 1,
                        test: Test::MaskedEq {
                            mask: 0o4000,
                            value: 0o4000,
                        },
                    },
                    Cond {
                        arg: 2,
                        test: Test::MaskedEq {
                            mask: 0o100,
                            value: 0o100,
                        },
                    },
                ],
                action: errno(1),
            },
            Rule {
                conds: vec![Cond {
                    arg: 0,
                    test: Test::Ne(1),
                }],
                action: errno(2),
            },
        ];
        let p = compile(X86_64, &[call(5, rules)], false).unwrap();
        let r = |a: [u64; 6]| run(&p, 5, X86_64, a);
        assert_eq!(r([1, 0o4000, 0o100, 0, 0, 0]), errno(1));
        assert_eq!(
            r([1, 0o4000 | (1 << 40), 0o100, 0, 0, 0]),
            errno(1),
            "high word ignored"
        );
        assert_eq!(
            r([1, 0o4000, 0, 0, 0, 0]),
            ALLOW,
            "second condition fails, rule 2 passes"
        );
        assert_eq!(r([2, 0o4000, 0, 0, 0, 0]), errno(2));
        assert_eq!(r([1 | (7 << 32), 0, 0, 0, 0, 0]), ALLOW);
        assert_eq!(run(&p, 6, X86_64, [9; 6]), ALLOW);
    }

    #[test]
    fn bad_tables_are_refused() {
        assert!(compile(X86_64, &[call(1, vec![]), call(1, vec![])], true).is_err());
        assert!(compile(X86_64, &[call(X32_SYSCALL_BIT | 1, vec![])], true).is_err());
        let far = Rule {
            conds: vec![Cond {
                arg: 6,
                test: Test::Ne(0),
            }],
            action: ALLOW,
        };
        assert!(compile(X86_64, &[call(1, vec![far])], true).is_err());
    }
}
