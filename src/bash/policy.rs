//! Command policy as plain functions over data (DESIGN §5.6–5.8; seed 001's evolving registry,
//! with its bugs fixed): the precedence table that decides whether a command runs, asks or is
//! refused, the starting policy of a new command, and the evolution rules applied after each run.
//! No I/O here: `bash::registry` loads and stores the rows, `bash::plan` turns the verdict into
//! the command's plan.

use serde::Serialize;

use crate::permset::PermissionSet;

pub const PROMOTION_MIN_RUNS: i64 = 20;
pub const PROMOTION_MIN_SUCCESS: f64 = 0.95;
pub const RISK_GATE: f64 = 0.7;
pub const DEMOTION_WINDOW: usize = 20;
pub const DEMOTION_MIN_SUCCESS: f64 = 0.80;
pub const MONITORING_MIN_RUNS: i64 = 50;
pub const MONITORING_MAX_INTERVAL_MS: f64 = 5_000.0;
pub const RARE_MIN_INTERVAL_MS: f64 = 3_600_000.0;
pub const RARE_THRESHOLD_MS: i64 = 30_000;
pub const DEFAULT_DUPLICATE_THRESHOLD_MS: i64 = 2_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    AutoApprove,
    Ask,
    AskWarning,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::AutoApprove => "auto_approve",
            Policy::Ask => "ask",
            Policy::AskWarning => "ask_warning",
        }
    }
    pub fn parse(s: &str) -> Policy {
        match s {
            "auto_approve" => Policy::AutoApprove,
            "ask_warning" => Policy::AskWarning,
            // Anything unknown asks: an unreadable policy never runs unasked.
            _ => Policy::Ask,
        }
    }
}

/// An override and its one strictness order live in the decision vocabulary.
pub use crate::decision::Override;

/// What the classifier said about the command (the parts policy needs).
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    pub blocked: bool,
    pub pure: bool,
    pub risk: f64,
    pub permission_set: PermissionSet,
    /// Readonly and below the warning gate: may run unasked when an enforcing sandbox confines it.
    pub sandbox_auto_approvable: bool,
    pub computed_program: bool,
    pub runs_workspace_file: bool,
}

/// The starting policy of a command seen for the first time (DESIGN §5.7).
pub fn starting_policy(f: &Facts, sandbox_enforcing: bool) -> (Policy, String) {
    if f.pure {
        (
            Policy::AutoApprove,
            "pure: no I/O beyond arguments, stdin and stdout".into(),
        )
    } else if f.sandbox_auto_approvable && sandbox_enforcing {
        (
            Policy::AutoApprove,
            "read-only, confined by an enforcing sandbox".into(),
        )
    } else if f.risk >= RISK_GATE {
        (
            Policy::AskWarning,
            format!(
                "risk {:.2} ≥ {RISK_GATE}: asks with a warning, never promoted",
                f.risk
            ),
        )
    } else {
        (Policy::Ask, format!("new command (risk {:.2})", f.risk))
    }
}

/// Why a command may never be promoted to auto_approve, if it may not.
pub fn never_promoted(f: &Facts, policy: Policy) -> Option<&'static str> {
    if policy == Policy::AskWarning || f.risk >= RISK_GATE {
        return Some("high risk");
    }
    if f.computed_program {
        return Some("its program name is computed at run time");
    }
    if f.runs_workspace_file && f.permission_set.network() {
        return Some("it executes workspace files with network access");
    }
    None
}

/// The inputs of one decision.
#[derive(Debug, Clone)]
pub struct Situation {
    pub facts: Facts,
    pub policy: Policy,
    pub user_override: Option<Override>,
    /// `force_execute: true` in the params.
    pub force_requested: bool,
    /// The client holds FORCE_EXECUTE.
    pub force_granted: bool,
    /// A human approved exactly this snapshot (a consumed approval).
    pub approved: bool,
    /// Milliseconds since the last run, when the duplicate check applies to this command.
    pub since_last_ms: Option<i64>,
    pub duplicate_threshold_ms: i64,
    pub duplicate_check_enabled: bool,
    /// The sandbox is enforcing here: read-only commands may run unasked (DESIGN §5.7).
    pub sandbox_enforcing: bool,
    /// The command's effects can be captured on an overlay of the workspace (no network, every
    /// write inside the workspace, enforcing sandbox, overlay enabled) — DESIGN §5.12.
    pub overlay: bool,
    /// Every operation signature of the command is learned (or `always_allow`).
    pub signatures_learned: bool,
    /// A signature of the command the operator set to `always_ask`.
    pub signature_always_ask: bool,
    /// A signature of the command the operator set to `never`.
    pub signature_never: Option<String>,
    /// The client's promotion of this command (`bash::evidence`): the confinement it was
    /// approved under — direct runs in the approved set, or overlay runs applied within bounds.
    pub promoted: Option<super::evidence::Mode>,
}

/// What allowed a run (the result's `policy_used`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// The operator's `always_allow` override.
    AlwaysAllow,
    /// A consumed approval of exactly this snapshot (a human's, or the reviewer's).
    Approved,
    /// The command's policy is auto_approve (pure, promoted by statistics, read-only confined).
    AutoApprove,
    /// Read-only and below the warning gate, under an enforcing sandbox.
    SandboxedReadonly,
    /// `force_execute` by a client granted FORCE_EXECUTE.
    ForceExecute,
    /// The client's direct promotion (`bash::evidence`).
    Promoted,
}

impl Allowed {
    pub fn as_str(self) -> &'static str {
        match self {
            Allowed::AlwaysAllow => "always_allow",
            Allowed::Approved => "approved",
            Allowed::AutoApprove => "auto_approve",
            Allowed::SandboxedReadonly => "sandboxed_readonly",
            Allowed::ForceExecute => "force_execute",
            Allowed::Promoted => "promoted",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Nothing lifts it.
    Blocked,
    /// `user_override = never`.
    Denied(String),
    /// Run it, allowed by this.
    Run(Allowed),
    /// Ask a human; the policy shown (ask / ask_warning / always_ask).
    Ask(String),
    /// Asked again too soon: nothing ran.
    Duplicate { seconds_since_last: f64 },
    /// Run on an overlay of the workspace; `auto`: apply the change set at once (learned
    /// signatures), else ask a human about the change set (when there is one).
    Overlay { auto: bool },
}

/// The precedence table (DESIGN §5.6): blocked > user_override > approval > force > policy.
pub fn decide(s: &Situation) -> Verdict {
    if s.facts.blocked {
        return Verdict::Blocked;
    }
    match s.user_override {
        Some(Override::Never) => {
            return Verdict::Denied("the operator set this command to `never`".into())
        }
        Some(Override::AlwaysAllow) => return Verdict::Run(Allowed::AlwaysAllow),
        Some(Override::AlwaysAsk) if !s.approved => return ask(s, "always_ask"),
        _ => {}
    }
    if let Some(sig) = &s.signature_never {
        return Verdict::Denied(format!("the operator set the signature `{sig}` to `never`"));
    }
    if s.approved {
        return Verdict::Run(Allowed::Approved);
    }
    if s.policy == Policy::AutoApprove {
        return Verdict::Run(Allowed::AutoApprove);
    }
    if s.policy == Policy::Ask && s.facts.sandbox_auto_approvable && s.sandbox_enforcing {
        return Verdict::Run(Allowed::SandboxedReadonly);
    }
    if s.force_requested && s.force_granted {
        return Verdict::Run(Allowed::ForceExecute);
    }
    // A promotion never widens: direct only if the human approved it direct (in this set);
    // overlay keeps the overlay (and falls back to asking when the overlay is unavailable).
    if s.policy == Policy::Ask && s.promoted == Some(super::evidence::Mode::Direct) {
        return Verdict::Run(Allowed::Promoted);
    }
    // Effects over commands: never for ask_warning (high risk asks up front with its warning).
    if s.overlay && s.policy == Policy::Ask {
        let promoted_overlay = s.promoted == Some(super::evidence::Mode::Overlay);
        if (s.signatures_learned || promoted_overlay) && !s.signature_always_ask {
            return Verdict::Overlay { auto: true };
        }
        return match ask(s, "ask") {
            Verdict::Ask(_) => Verdict::Overlay { auto: false },
            other => other,
        };
    }
    ask(s, s.policy.as_str())
}

fn ask(s: &Situation, shown: &str) -> Verdict {
    if s.duplicate_check_enabled {
        if let Some(ms) = s.since_last_ms {
            if ms >= 0 && ms < s.duplicate_threshold_ms {
                return Verdict::Duplicate {
                    seconds_since_last: ms as f64 / 1000.0,
                };
            }
        }
    }
    Verdict::Ask(shown.to_string())
}

/// The registry's statistics of one command (after the current run is counted).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub execution_count: i64,
    pub success_count: i64,
    /// Oldest first, at most 100.
    pub timestamps: Vec<i64>,
    /// Success of the most recent runs, newest last (at least the last 20).
    pub recent_success: Vec<bool>,
    pub duplicate_check_enabled: bool,
    pub duplicate_threshold_ms: i64,
}

/// Mean interval between the stored timestamps: (last − first) / (n − 1) (seed 001).
pub fn mean_interval_ms(ts: &[i64]) -> Option<f64> {
    if ts.len() < 2 {
        return None;
    }
    let (first, last) = (ts[0], ts[ts.len() - 1]);
    Some((last - first) as f64 / (ts.len() - 1) as f64)
}

/// A change the evolution rules make.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Policy { to: Policy, reason: String },
    DuplicateCheck { enabled: bool, reason: String },
    DuplicateThreshold { ms: i64, reason: String },
}

/// Evolution after a run (DESIGN §5.8). `promoted` says whether the current auto_approve came from
/// a promotion (pure commands start auto-approved and are never demoted by failures).
pub fn evolve(
    f: &Facts,
    policy: Policy,
    user_override: Option<Override>,
    promoted: bool,
    st: &Stats,
) -> Vec<Change> {
    let mut out = Vec::new();
    let rate = if st.execution_count > 0 {
        st.success_count as f64 / st.execution_count as f64
    } else {
        0.0
    };
    if policy == Policy::Ask
        && user_override.is_none()
        && st.execution_count >= PROMOTION_MIN_RUNS
        && rate >= PROMOTION_MIN_SUCCESS
        && never_promoted(f, policy).is_none()
    {
        out.push(Change::Policy {
            to: Policy::AutoApprove,
            reason: format!(
                "promoted: {} runs, {:.0}% success, risk {:.2} < {RISK_GATE}",
                st.execution_count,
                rate * 100.0,
                f.risk
            ),
        });
    }
    if policy == Policy::AutoApprove && promoted && st.recent_success.len() >= DEMOTION_WINDOW {
        let recent = &st.recent_success[st.recent_success.len() - DEMOTION_WINDOW..];
        let ok = recent.iter().filter(|b| **b).count() as f64 / DEMOTION_WINDOW as f64;
        if ok < DEMOTION_MIN_SUCCESS {
            out.push(Change::Policy {
                to: Policy::Ask,
                reason: format!(
                    "demoted: {:.0}% success over the last {DEMOTION_WINDOW} runs < 80%",
                    ok * 100.0
                ),
            });
        }
    }
    if let Some(mean) = mean_interval_ms(&st.timestamps) {
        if st.duplicate_check_enabled
            && st.execution_count >= MONITORING_MIN_RUNS
            && mean < MONITORING_MAX_INTERVAL_MS
        {
            out.push(Change::DuplicateCheck {
                enabled: false,
                reason: format!(
                    "monitoring pattern: {} runs, mean interval {:.1} s < 5 s",
                    st.execution_count,
                    mean / 1000.0
                ),
            });
        }
        if mean > RARE_MIN_INTERVAL_MS && st.duplicate_threshold_ms < RARE_THRESHOLD_MS {
            out.push(Change::DuplicateThreshold {
                ms: RARE_THRESHOLD_MS,
                reason: format!(
                    "rare command: mean interval {:.1} h > 1 h",
                    mean / 3_600_000.0
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(pure: bool, risk: f64) -> Facts {
        Facts {
            blocked: false,
            pure,
            risk,
            permission_set: if pure {
                PermissionSet::Minimal
            } else {
                PermissionSet::Filesystem
            },
            sandbox_auto_approvable: false,
            computed_program: false,
            runs_workspace_file: false,
        }
    }

    fn sit(f: Facts, policy: Policy) -> Situation {
        Situation {
            facts: f,
            policy,
            user_override: None,
            force_requested: false,
            force_granted: false,
            approved: false,
            since_last_ms: None,
            duplicate_threshold_ms: DEFAULT_DUPLICATE_THRESHOLD_MS,
            duplicate_check_enabled: true,
            sandbox_enforcing: false,
            overlay: false,
            signatures_learned: false,
            signature_always_ask: false,
            signature_never: None,
            promoted: None,
        }
    }

    /// The precedence table, row by row.
    #[test]
    /// Long because the table is the specification: one row per case, read together.
    fn precedence_table() {
        let blocked = Facts {
            blocked: true,
            ..facts(false, 1.0)
        };
        type Case = (&'static str, Situation, Verdict);
        let run = Verdict::Run;
        let askv = |s: &str| Verdict::Ask(s.into());
        let readonly = Facts {
            sandbox_auto_approvable: true,
            permission_set: PermissionSet::Readonly,
            ..facts(false, 0.1)
        };
        let overlay = |learned: bool| Situation {
            sandbox_enforcing: true,
            overlay: true,
            signatures_learned: learned,
            ..sit(facts(false, 0.3), Policy::Ask)
        };
        let ov = |auto: bool| Verdict::Overlay { auto };
        let cases: Vec<Case> = vec![
            (
                "a capturable write runs on the overlay and asks about its change set",
                overlay(false),
                ov(false),
            ),
            (
                "learned signatures: the change set is applied at once",
                overlay(true),
                ov(true),
            ),
            (
                "a signature set to always_ask keeps asking on the overlay",
                Situation {
                    signature_always_ask: true,
                    ..overlay(true)
                },
                ov(false),
            ),
            (
                "a signature set to never denies",
                Situation {
                    signature_never: Some("rm WS_PATH".into()),
                    ..overlay(true)
                },
                Verdict::Denied("the operator set the signature `rm WS_PATH` to `never`".into()),
            ),
            (
                "blocked beats learned signatures",
                Situation {
                    facts: Facts {
                        blocked: true,
                        ..facts(false, 0.3)
                    },
                    ..overlay(true)
                },
                Verdict::Blocked,
            ),
            (
                "ask_warning never goes to the overlay: asks up front",
                Situation {
                    policy: Policy::AskWarning,
                    facts: facts(false, 0.8),
                    ..overlay(true)
                },
                askv("ask_warning"),
            ),
            (
                "a command override always_ask asks up front even when learned",
                Situation {
                    user_override: Some(Override::AlwaysAsk),
                    ..overlay(true)
                },
                askv("always_ask"),
            ),
            (
                "an approval of the change set applies it (approved)",
                Situation {
                    approved: true,
                    ..overlay(false)
                },
                run(Allowed::Approved),
            ),
            (
                "not capturable (network or outside writes): asks up front even if learned",
                Situation {
                    overlay: false,
                    ..overlay(true)
                },
                askv("ask"),
            ),
            (
                "the duplicate check applies before an overlay ask",
                Situation {
                    since_last_ms: Some(100),
                    ..overlay(false)
                },
                Verdict::Duplicate {
                    seconds_since_last: 0.1,
                },
            ),
            (
                "force with the grant runs for real before the overlay",
                Situation {
                    force_requested: true,
                    force_granted: true,
                    ..overlay(false)
                },
                run(Allowed::ForceExecute),
            ),
            (
                "readonly runs unasked under an enforcing sandbox",
                Situation {
                    sandbox_enforcing: true,
                    ..sit(readonly.clone(), Policy::Ask)
                },
                run(Allowed::SandboxedReadonly),
            ),
            (
                "readonly asks without one",
                sit(readonly.clone(), Policy::Ask),
                askv("ask"),
            ),
            (
                "always_ask beats the sandbox rule",
                Situation {
                    sandbox_enforcing: true,
                    user_override: Some(Override::AlwaysAsk),
                    ..sit(readonly.clone(), Policy::Ask)
                },
                askv("always_ask"),
            ),
            (
                "a write is not readonly: asks even under the sandbox",
                Situation {
                    sandbox_enforcing: true,
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                askv("ask"),
            ),
            (
                "blocked beats always_allow",
                Situation {
                    user_override: Some(Override::AlwaysAllow),
                    ..sit(blocked.clone(), Policy::AutoApprove)
                },
                Verdict::Blocked,
            ),
            (
                "blocked beats force",
                Situation {
                    force_requested: true,
                    force_granted: true,
                    ..sit(blocked.clone(), Policy::Ask)
                },
                Verdict::Blocked,
            ),
            (
                "blocked beats an approval",
                Situation {
                    approved: true,
                    ..sit(blocked, Policy::Ask)
                },
                Verdict::Blocked,
            ),
            (
                "never denies an auto_approve command",
                Situation {
                    user_override: Some(Override::Never),
                    ..sit(facts(true, 0.0), Policy::AutoApprove)
                },
                Verdict::Denied("the operator set this command to `never`".into()),
            ),
            (
                "never beats an approval",
                Situation {
                    user_override: Some(Override::Never),
                    approved: true,
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                Verdict::Denied("the operator set this command to `never`".into()),
            ),
            (
                "always_ask asks even when auto_approve",
                Situation {
                    user_override: Some(Override::AlwaysAsk),
                    ..sit(facts(true, 0.0), Policy::AutoApprove)
                },
                askv("always_ask"),
            ),
            (
                "always_ask asks even with force",
                Situation {
                    user_override: Some(Override::AlwaysAsk),
                    force_requested: true,
                    force_granted: true,
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                askv("always_ask"),
            ),
            (
                "always_ask runs once approved",
                Situation {
                    user_override: Some(Override::AlwaysAsk),
                    approved: true,
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                run(Allowed::Approved),
            ),
            (
                "always_allow runs an ask command",
                Situation {
                    user_override: Some(Override::AlwaysAllow),
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                run(Allowed::AlwaysAllow),
            ),
            (
                "auto_approve runs",
                sit(facts(true, 0.0), Policy::AutoApprove),
                run(Allowed::AutoApprove),
            ),
            ("ask asks", sit(facts(false, 0.3), Policy::Ask), askv("ask")),
            (
                "ask_warning asks with the warning",
                sit(facts(false, 0.8), Policy::AskWarning),
                askv("ask_warning"),
            ),
            (
                "force without the grant still asks",
                Situation {
                    force_requested: true,
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                askv("ask"),
            ),
            (
                "force with the grant skips ask",
                Situation {
                    force_requested: true,
                    force_granted: true,
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                run(Allowed::ForceExecute),
            ),
            (
                "an approval runs",
                Situation {
                    approved: true,
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                run(Allowed::Approved),
            ),
            (
                "asked again within 2 s: duplicate",
                Situation {
                    since_last_ms: Some(500),
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                Verdict::Duplicate {
                    seconds_since_last: 0.5,
                },
            ),
            (
                "asked again after the threshold: asks",
                Situation {
                    since_last_ms: Some(2500),
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                askv("ask"),
            ),
            (
                "monitoring pattern: no duplicate check",
                Situation {
                    since_last_ms: Some(500),
                    duplicate_check_enabled: false,
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                askv("ask"),
            ),
            (
                "rare command: 30 s threshold",
                Situation {
                    since_last_ms: Some(10_000),
                    duplicate_threshold_ms: RARE_THRESHOLD_MS,
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                Verdict::Duplicate {
                    seconds_since_last: 10.0,
                },
            ),
            (
                "an auto-approved command is never a duplicate",
                Situation {
                    since_last_ms: Some(10),
                    ..sit(facts(true, 0.0), Policy::AutoApprove)
                },
                run(Allowed::AutoApprove),
            ),
            (
                "promoted direct (approved up front in this set): runs in it",
                Situation {
                    promoted: Some(super::super::evidence::Mode::Direct),
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                run(Allowed::Promoted),
            ),
            (
                "promoted on the overlay: keeps the overlay, applied within bounds",
                Situation {
                    promoted: Some(super::super::evidence::Mode::Overlay),
                    ..overlay(false)
                },
                ov(true),
            ),
            (
                "promoted on the overlay but no overlay now: asks, never runs direct",
                Situation {
                    promoted: Some(super::super::evidence::Mode::Overlay),
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                askv("ask"),
            ),
            (
                "a promotion never lifts ask_warning",
                Situation {
                    promoted: Some(super::super::evidence::Mode::Direct),
                    ..sit(facts(false, 0.8), Policy::AskWarning)
                },
                askv("ask_warning"),
            ),
            (
                "always_ask beats a promotion",
                Situation {
                    promoted: Some(super::super::evidence::Mode::Direct),
                    user_override: Some(Override::AlwaysAsk),
                    ..sit(facts(false, 0.3), Policy::Ask)
                },
                askv("always_ask"),
            ),
            (
                "a signature set to always_ask beats an overlay promotion",
                Situation {
                    promoted: Some(super::super::evidence::Mode::Overlay),
                    signature_always_ask: true,
                    ..overlay(false)
                },
                ov(false),
            ),
        ];
        for (name, s, want) in cases {
            assert_eq!(decide(&s), want, "{name}");
        }
    }

    #[test]
    fn starting_policies() {
        assert_eq!(
            starting_policy(&facts(true, 0.0), false).0,
            Policy::AutoApprove
        );
        assert_eq!(starting_policy(&facts(false, 0.3), false).0, Policy::Ask);
        assert_eq!(
            starting_policy(&facts(false, 0.75), false).0,
            Policy::AskWarning
        );
        let ro = Facts {
            sandbox_auto_approvable: true,
            permission_set: PermissionSet::Readonly,
            ..facts(false, 0.1)
        };
        assert_eq!(
            starting_policy(&ro, false).0,
            Policy::Ask,
            "readonly asks without an enforcing sandbox"
        );
        assert_eq!(starting_policy(&ro, true).0, Policy::AutoApprove);
    }

    fn stats(n: i64, ok: i64, interval_ms: i64) -> Stats {
        let count = n.min(100) as usize;
        Stats {
            execution_count: n,
            success_count: ok,
            timestamps: (0..count as i64)
                .map(|i| 1_000_000 + i * interval_ms)
                .collect(),
            recent_success: (0..n).map(|i| i < ok).collect(),
            duplicate_check_enabled: true,
            duplicate_threshold_ms: DEFAULT_DUPLICATE_THRESHOLD_MS,
        }
    }

    #[test]
    fn promotion_needs_20_runs_95_percent_and_low_risk() {
        let f = facts(false, 0.3);
        let promoted = |c: &[Change]| {
            c.iter().any(|c| {
                matches!(
                    c,
                    Change::Policy {
                        to: Policy::AutoApprove,
                        ..
                    }
                )
            })
        };
        assert!(!promoted(&evolve(
            &f,
            Policy::Ask,
            None,
            false,
            &stats(19, 19, 60_000)
        )));
        assert!(promoted(&evolve(
            &f,
            Policy::Ask,
            None,
            false,
            &stats(20, 19, 60_000)
        )));
        assert!(
            !promoted(&evolve(
                &f,
                Policy::Ask,
                None,
                false,
                &stats(20, 18, 60_000)
            )),
            "90% is not enough"
        );
        assert!(
            !promoted(&evolve(
                &facts(false, 0.7),
                Policy::Ask,
                None,
                false,
                &stats(50, 50, 60_000)
            )),
            "risk gate"
        );
        assert!(
            !promoted(&evolve(
                &f,
                Policy::AskWarning,
                None,
                false,
                &stats(50, 50, 60_000)
            )),
            "ask_warning never"
        );
        assert!(
            !promoted(&evolve(
                &f,
                Policy::Ask,
                Some(Override::AlwaysAsk),
                false,
                &stats(50, 50, 60_000)
            )),
            "override wins"
        );
        let computed = Facts {
            computed_program: true,
            ..f.clone()
        };
        assert!(!promoted(&evolve(
            &computed,
            Policy::Ask,
            None,
            false,
            &stats(50, 50, 60_000)
        )));
        let script_net = Facts {
            runs_workspace_file: true,
            permission_set: PermissionSet::McpStandard,
            ..f.clone()
        };
        assert!(!promoted(&evolve(
            &script_net,
            Policy::Ask,
            None,
            false,
            &stats(50, 50, 60_000)
        )));
        let script_local = Facts {
            runs_workspace_file: true,
            permission_set: PermissionSet::Filesystem,
            ..f
        };
        assert!(promoted(&evolve(
            &script_local,
            Policy::Ask,
            None,
            false,
            &stats(50, 50, 60_000)
        )));
    }

    #[test]
    fn demotion_below_80_percent_over_the_last_20() {
        let f = facts(false, 0.3);
        let mut st = stats(40, 40, 60_000);
        st.recent_success = (0..40).map(|i| i < 24 || i % 3 != 0).collect(); // last 20: 14/20 = 70%
        let c = evolve(&f, Policy::AutoApprove, None, true, &st);
        assert!(
            c.iter().any(|c| matches!(
                c,
                Change::Policy {
                    to: Policy::Ask,
                    ..
                }
            )),
            "{c:?}"
        );
        // A pure command (auto-approved from the start, not promoted) is not demoted by failures.
        assert!(evolve(&facts(true, 0.0), Policy::AutoApprove, None, false, &st).is_empty());
    }

    #[test]
    fn monitoring_and_rare_rules() {
        let f = facts(false, 0.3);
        let c = evolve(&f, Policy::AutoApprove, None, true, &stats(60, 60, 1_000));
        assert!(
            c.iter()
                .any(|c| matches!(c, Change::DuplicateCheck { enabled: false, .. })),
            "{c:?}"
        );
        assert!(
            !evolve(&f, Policy::AutoApprove, None, true, &stats(49, 49, 1_000))
                .iter()
                .any(|c| matches!(c, Change::DuplicateCheck { .. }))
        );
        let c = evolve(&f, Policy::Ask, None, false, &stats(3, 3, 2 * 3_600_000));
        assert!(
            c.iter()
                .any(|c| matches!(c, Change::DuplicateThreshold { ms: 30_000, .. })),
            "{c:?}"
        );
        assert_eq!(mean_interval_ms(&[0, 10, 30]), Some(15.0));
    }
}
