//! The command's plan and what follows its run, as pure functions over data (issue 32):
//! [`plan`] turns the precedence table's verdict (`policy::decide`) and what this job carries (an
//! approval of the command, of its change set or of its host request; a change set waiting) into
//! one [`Plan`] — refuse, ask, run directly in a set, run on the overlay, or apply the approved
//! change set. [`after_run`] reads a confined run's report (and, on the overlay, its captured
//! effects) and says what comes next — fail, ask about the command, its hosts or its effects,
//! finish, or apply. `bash::command` carries both out; nothing here does I/O.

use super::confined::{Ended, Report};
use super::policy::{self, Allowed, Verdict};
use super::record::Happened;
use crate::permset::PermissionSet;

/// Everything the plan depends on.
#[derive(Debug, Clone)]
pub struct Situation {
    /// The precedence table's inputs; its `approved` is true for any consumed approval of this
    /// job (the command, its change set, or its host request).
    pub policy: policy::Situation,
    /// That approval was a human's answer to the command's host request (issue 23).
    pub hosts_approved: bool,
    /// That approval was a human's (not the `[reviewer]` command's).
    pub by_human: bool,
    /// A change set of this job's overlay run waits, for this very command.
    pub pending: bool,
    /// The set a direct run gets: the one the registry recorded (approved or promoted under),
    /// else the classifier's; a stored name this build does not know is the narrowest.
    pub set: PermissionSet,
}

/// Why nothing runs and nobody is asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    Blocked,
    /// The operator's `never` (on the command or a signature).
    Denied(String),
    /// Asked again too soon.
    Duplicate {
        seconds_since_last: f64,
    },
}

/// Why an overlay run's change set may be applied without a human.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auto {
    /// Every operation signature of the command is learned.
    SignatureLearned,
    /// The client's overlay promotion (`bash::evidence`).
    Promoted,
}

impl Auto {
    pub fn as_str(self) -> &'static str {
        match self {
            Auto::SignatureLearned => "signature_learned",
            Auto::Promoted => "promoted",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    Refuse(Refusal),
    /// Ask a human about the command up front; `shown`: ask / ask_warning / always_ask.
    Ask {
        shown: String,
        force_refused: bool,
    },
    /// Run it in `set` (its registry row's), directly.
    Direct {
        set: PermissionSet,
        allowed: Allowed,
        happened: Happened,
    },
    /// Run it on an overlay of the workspace; `auto`: apply the change set without a human
    /// (within `bash::effects`' bounds), else ask about it.
    Overlay {
        auto: Option<Auto>,
        force_refused: bool,
    },
    /// Apply this job's approved change set; nothing runs again.
    Apply {
        happened: Happened,
    },
}

impl Plan {
    /// A change set waiting for this job is kept only to be applied: any other plan drops it
    /// (denied by an override since, or superseded).
    pub fn keeps_pending(&self) -> bool {
        matches!(self, Plan::Apply { .. })
    }
}

/// The plan of one command (the precedence table first, then what this job carries).
pub fn plan(s: &Situation) -> Plan {
    let p = &s.policy;
    let force_refused = p.force_requested && !p.force_granted;
    match policy::decide(p) {
        Verdict::Blocked => Plan::Refuse(Refusal::Blocked),
        Verdict::Denied(why) => Plan::Refuse(Refusal::Denied(why)),
        Verdict::Duplicate { seconds_since_last } => {
            Plan::Refuse(Refusal::Duplicate { seconds_since_last })
        }
        Verdict::Ask(shown) => Plan::Ask {
            shown,
            force_refused,
        },
        // The hosts a human approved: run again with them, on the overlay when capturable.
        Verdict::Run(_) if s.hosts_approved && p.overlay => Plan::Overlay {
            auto: None,
            force_refused: false,
        },
        Verdict::Overlay { auto } => Plan::Overlay {
            auto: auto.then_some(if p.signatures_learned {
                Auto::SignatureLearned
            } else {
                Auto::Promoted
            }),
            force_refused,
        },
        // An approved change set is applied, never re-run — also when `approve --always` has
        // just set always_allow (which precedes the approval in the table).
        Verdict::Run(_) if s.pending && p.approved && !s.hosts_approved => Plan::Apply {
            happened: Happened::of(Allowed::Approved, s.by_human),
        },
        Verdict::Run(allowed) => Plan::Direct {
            set: s.set,
            allowed,
            happened: Happened::of(allowed, s.by_human),
        },
    }
}

/// What an overlay run changed, and why it may not be applied without a human.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effects {
    /// It changed nothing.
    pub empty: bool,
    /// Why its learned signatures do not cover it (`effects::auto_apply_refusals`).
    pub auto_refusals: Vec<String>,
    /// The protected paths it touches (`effects::protected_refusals`): said in every prompt.
    pub protected: Vec<String>,
}

/// What follows a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// The worker stopped it: it runs again later.
    Cancelled,
    /// Nothing ran (the message says why).
    Fail(String),
    /// The overlay's cap stopped it (the helper's record); nothing kept.
    OverCap(String),
    /// The overlay is unavailable here, so nothing ran: ask about the command up front.
    AskCommand { force_refused: bool },
    /// The proxy refused these hosts: ask about them; nothing of the run is kept.
    AskHosts {
        hosts: Vec<String>,
        force_refused: bool,
    },
    /// The direct run's result.
    Finish,
    /// The overlay run went through: capture its change set, then `after_run` again with it.
    Capture,
    /// The overlay run changed nothing: its result (`policy_used`).
    NoChanges(&'static str),
    /// Apply the change set without a human.
    Apply(Auto),
    /// Ask about the change set, these reasons first.
    AskEffects {
        reasons: Vec<String>,
        force_refused: bool,
    },
}

impl Next {
    /// The run is counted in the registry (it ran; what it did is known).
    pub fn records_run(&self) -> bool {
        matches!(self, Next::Finish | Next::Capture | Next::AskHosts { .. })
    }
    /// An overlay run's layers stay (to be captured, applied, or shown to a human).
    pub fn keeps_layers(&self) -> bool {
        matches!(
            self,
            Next::Capture | Next::Apply(_) | Next::AskEffects { .. }
        )
    }
}

/// What follows a run of `plan` (an overlay plan runs on the overlay; any other, directly);
/// `effects`: the overlay run's captured change set, once [`Next::Capture`] was done.
pub fn after_run(plan: &Plan, report: &Report, effects: Option<&Effects>) -> Next {
    let (overlay, auto, force_refused) = match plan {
        Plan::Overlay {
            auto,
            force_refused,
        } => (true, *auto, *force_refused),
        _ => (false, None, false),
    };
    match &report.ended {
        Ended::Cancelled => return Next::Cancelled,
        Ended::OverCap(what) => return Next::OverCap(what.clone()),
        Ended::NotRun(n) if overlay && n.overlay_unavailable => {
            return Next::AskCommand { force_refused }
        }
        Ended::NotRun(n) => return Next::Fail(n.message.clone()),
        Ended::Ran(_) => {}
    }
    let hosts = crate::egress::refused(&report.connections);
    if !hosts.is_empty() {
        // What it did without those hosts is not what a human would approve.
        return Next::AskHosts {
            hosts,
            force_refused,
        };
    }
    if !overlay {
        return Next::Finish;
    }
    let Some(e) = effects else {
        return Next::Capture;
    };
    if e.empty {
        return Next::NoChanges(auto.map_or("overlay_no_changes", Auto::as_str));
    }
    match auto {
        Some(a) if e.auto_refusals.is_empty() => Next::Apply(a),
        Some(_) => Next::AskEffects {
            reasons: e
                .auto_refusals
                .iter()
                .map(|w| format!("not applied automatically: {w}"))
                .collect(),
            force_refused,
        },
        None => Next::AskEffects {
            reasons: e.protected.clone(),
            force_refused,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bash::confined::NotRun;
    use crate::bash::evidence::Mode;
    use crate::bash::executor::ExecResult;
    use crate::bash::policy::{Facts, Override, Policy, DEFAULT_DUPLICATE_THRESHOLD_MS};

    fn sit(policy: Policy) -> Situation {
        Situation {
            policy: policy::Situation {
                facts: Facts {
                    blocked: false,
                    pure: false,
                    risk: 0.3,
                    permission_set: crate::permset::PermissionSet::Filesystem,
                    sandbox_auto_approvable: false,
                    computed_program: false,
                    runs_workspace_file: false,
                },
                policy,
                user_override: None,
                force_requested: false,
                force_granted: false,
                approved: false,
                since_last_ms: None,
                duplicate_threshold_ms: DEFAULT_DUPLICATE_THRESHOLD_MS,
                duplicate_check_enabled: true,
                sandbox_enforcing: true,
                overlay: false,
                signatures_learned: false,
                signature_always_ask: false,
                signature_never: None,
                promoted: None,
            },
            hosts_approved: false,
            by_human: true,
            pending: false,
            set: PermissionSet::Filesystem,
        }
    }

    /// `sit` with the policy part changed.
    fn with(mut s: Situation, f: impl FnOnce(&mut policy::Situation)) -> Situation {
        f(&mut s.policy);
        s
    }

    fn direct(allowed: Allowed, happened: Happened) -> Plan {
        Plan::Direct {
            set: PermissionSet::Filesystem,
            allowed,
            happened,
        }
    }

    /// The plan, row by row (the precedence table itself is `policy::tests::precedence_table`).
    #[test]
    /// Long because the table is the specification: one row per case, read together.
    fn plan_table() {
        let ask = || sit(Policy::Ask);
        let capturable = |learned: bool| {
            with(ask(), |p| {
                p.overlay = true;
                p.signatures_learned = learned;
            })
        };
        let approved = |s: Situation| with(s, |p| p.approved = true);
        let cases: Vec<(&str, Situation, Plan)> = vec![
            (
                "blocked is refused",
                with(ask(), |p| p.facts.blocked = true),
                Plan::Refuse(Refusal::Blocked),
            ),
            (
                "never is refused with the reason",
                with(ask(), |p| p.user_override = Some(Override::Never)),
                Plan::Refuse(Refusal::Denied(
                    "the operator set this command to `never`".into(),
                )),
            ),
            (
                "a duplicate is refused",
                with(ask(), |p| p.since_last_ms = Some(100)),
                Plan::Refuse(Refusal::Duplicate {
                    seconds_since_last: 0.1,
                }),
            ),
            (
                "ask names the refused force",
                with(ask(), |p| p.force_requested = true),
                Plan::Ask {
                    shown: "ask".into(),
                    force_refused: true,
                },
            ),
            (
                "force granted runs directly, forced",
                with(ask(), |p| {
                    p.force_requested = true;
                    p.force_granted = true;
                }),
                direct(Allowed::ForceExecute, Happened::Forced),
            ),
            (
                "a human's approval runs directly as a human-approved run",
                approved(ask()),
                direct(Allowed::Approved, Happened::HumanApproved),
            ),
            (
                "the reviewer's approval runs, and is no human's",
                Situation {
                    by_human: false,
                    ..approved(ask())
                },
                direct(Allowed::Approved, Happened::ReviewerApproved),
            ),
            (
                "always_allow runs as the operator's override",
                with(ask(), |p| p.user_override = Some(Override::AlwaysAllow)),
                direct(Allowed::AlwaysAllow, Happened::OperatorOverride),
            ),
            (
                "auto_approve runs unattended",
                sit(Policy::AutoApprove),
                direct(Allowed::AutoApprove, Happened::Unattended),
            ),
            (
                "a direct promotion runs unattended",
                with(ask(), |p| p.promoted = Some(Mode::Direct)),
                direct(Allowed::Promoted, Happened::Unattended),
            ),
            (
                "the registry's set is the one run",
                Situation {
                    set: PermissionSet::NetworkApi,
                    ..sit(Policy::AutoApprove)
                },
                Plan::Direct {
                    set: PermissionSet::NetworkApi,
                    allowed: Allowed::AutoApprove,
                    happened: Happened::Unattended,
                },
            ),
            (
                "capturable: the overlay, asked about its change set",
                capturable(false),
                Plan::Overlay {
                    auto: None,
                    force_refused: false,
                },
            ),
            (
                "learned signatures: the overlay, applied as signature_learned",
                capturable(true),
                Plan::Overlay {
                    auto: Some(Auto::SignatureLearned),
                    force_refused: false,
                },
            ),
            (
                "an overlay promotion: applied as promoted",
                with(capturable(false), |p| p.promoted = Some(Mode::Overlay)),
                Plan::Overlay {
                    auto: Some(Auto::Promoted),
                    force_refused: false,
                },
            ),
            (
                "the overlay keeps a refused force to say so",
                with(capturable(false), |p| p.force_requested = true),
                Plan::Overlay {
                    auto: None,
                    force_refused: true,
                },
            ),
            (
                "approved hosts of a capturable command: the overlay again, asked",
                Situation {
                    hosts_approved: true,
                    ..approved(capturable(true))
                },
                Plan::Overlay {
                    auto: None,
                    force_refused: false,
                },
            ),
            (
                "approved hosts of another command: directly, approved",
                Situation {
                    hosts_approved: true,
                    ..approved(ask())
                },
                direct(Allowed::Approved, Happened::HumanApproved),
            ),
            (
                "an approved change set waiting is applied, not re-run",
                Situation {
                    pending: true,
                    ..approved(capturable(false))
                },
                Plan::Apply {
                    happened: Happened::HumanApproved,
                },
            ),
            (
                "also under always_allow set by `approve --always`",
                Situation {
                    pending: true,
                    ..approved(with(capturable(false), |p| {
                        p.user_override = Some(Override::AlwaysAllow)
                    }))
                },
                Plan::Apply {
                    happened: Happened::HumanApproved,
                },
            ),
            (
                "the reviewer's approval of a change set applies it, as the reviewer's",
                Situation {
                    pending: true,
                    by_human: false,
                    ..approved(capturable(false))
                },
                Plan::Apply {
                    happened: Happened::ReviewerApproved,
                },
            ),
            (
                "a change set waiting but never is refused",
                Situation {
                    pending: true,
                    ..approved(with(capturable(false), |p| {
                        p.user_override = Some(Override::Never)
                    }))
                },
                Plan::Refuse(Refusal::Denied(
                    "the operator set this command to `never`".into(),
                )),
            ),
        ];
        for (name, s, want) in cases {
            let got = plan(&s);
            assert_eq!(got, want, "{name}");
            assert_eq!(
                got.keeps_pending(),
                matches!(want, Plan::Apply { .. }),
                "{name}"
            );
        }
    }

    fn report(ended: Ended, refused: &[&str]) -> Report {
        let connections = refused
            .iter()
            .map(|h| crate::egress::proxy::Connection {
                host: h.to_string(),
                port: 443,
                protocol: "connect".into(),
                outcome: "refused".into(),
                rule: None,
                address: None,
                reason: None,
                bytes_up: 0,
                bytes_down: 0,
                at_ms: 0,
                attempts: 1,
                first_ms: 0,
            })
            .collect();
        Report {
            ended,
            label: "strict".into(),
            connections,
        }
    }

    fn ran(code: i32) -> Ended {
        Ended::Ran(ExecResult {
            exit_code: Some(code),
            ..ExecResult::default()
        })
    }

    /// What follows a run, row by row.
    #[test]
    /// Long because the table is the specification: one row per case, read together.
    fn after_run_table() {
        let d = direct(Allowed::AutoApprove, Happened::Unattended);
        let ov = |auto: Option<Auto>| Plan::Overlay {
            auto,
            force_refused: true,
        };
        let learned = ov(Some(Auto::SignatureLearned));
        let unavailable = Ended::NotRun(NotRun {
            message: "no overlay".into(),
            overlay_unavailable: true,
        });
        let changed = |auto_refusals: &[&str], protected: &[&str]| Effects {
            empty: false,
            auto_refusals: auto_refusals.iter().map(|s| s.to_string()).collect(),
            protected: protected.iter().map(|s| s.to_string()).collect(),
        };
        let empty = Effects {
            empty: true,
            ..Effects::default()
        };
        let ask_effects = |reasons: &[&str]| Next::AskEffects {
            reasons: reasons.iter().map(|s| s.to_string()).collect(),
            force_refused: true,
        };
        type Case<'a> = (&'a str, Plan, Report, Option<Effects>, Next);
        let cases: Vec<Case> = vec![
            (
                "direct: exit 1 is a result",
                d.clone(),
                report(ran(1), &[]),
                None,
                Next::Finish,
            ),
            (
                "direct: cancelled",
                d.clone(),
                report(Ended::Cancelled, &[]),
                None,
                Next::Cancelled,
            ),
            (
                "direct: not confined fails with the text",
                d.clone(),
                report(
                    Ended::NotRun(NotRun {
                        message: "no sandbox".into(),
                        overlay_unavailable: false,
                    }),
                    &[],
                ),
                None,
                Next::Fail("no sandbox".into()),
            ),
            (
                "direct: an overlay error is no reason to ask",
                d.clone(),
                report(unavailable.clone(), &[]),
                None,
                Next::Fail("no overlay".into()),
            ),
            (
                "direct: refused hosts ask (no force to mention)",
                d.clone(),
                report(ran(0), &["example.com"]),
                None,
                Next::AskHosts {
                    hosts: vec!["example.com:443".into()],
                    force_refused: false,
                },
            ),
            (
                "overlay unavailable: ask up front",
                learned.clone(),
                report(unavailable, &[]),
                None,
                Next::AskCommand {
                    force_refused: true,
                },
            ),
            (
                "overlay over its cap",
                learned.clone(),
                report(Ended::OverCap("bytes 1 2".into()), &[]),
                None,
                Next::OverCap("bytes 1 2".into()),
            ),
            (
                "overlay: refused hosts ask before any effect",
                learned.clone(),
                report(ran(0), &["example.com"]),
                Some(changed(&[], &[])),
                Next::AskHosts {
                    hosts: vec!["example.com:443".into()],
                    force_refused: true,
                },
            ),
            (
                "overlay ran: capture",
                learned.clone(),
                report(ran(0), &[]),
                None,
                Next::Capture,
            ),
            (
                "no change, asked: overlay_no_changes",
                ov(None),
                report(ran(0), &[]),
                Some(empty.clone()),
                Next::NoChanges("overlay_no_changes"),
            ),
            (
                "no change, learned: signature_learned",
                learned.clone(),
                report(ran(0), &[]),
                Some(empty),
                Next::NoChanges("signature_learned"),
            ),
            (
                "learned and within bounds: applied",
                learned.clone(),
                report(ran(0), &[]),
                Some(changed(&[], &[])),
                Next::Apply(Auto::SignatureLearned),
            ),
            (
                "promoted and within bounds: applied as promoted",
                ov(Some(Auto::Promoted)),
                report(ran(1), &[]),
                Some(changed(&[], &[])),
                Next::Apply(Auto::Promoted),
            ),
            (
                "learned but beyond what it names: asked, the reasons first",
                learned.clone(),
                report(ran(0), &[]),
                Some(changed(&["adds x, which the command does not name"], &[])),
                ask_effects(&[
                    "not applied automatically: adds x, which the command does not name",
                ]),
            ),
            (
                "asked: the protected paths are said",
                ov(None),
                report(ran(0), &[]),
                Some(changed(
                    &["unused"],
                    &["touches a protected path .git/config"],
                )),
                ask_effects(&["touches a protected path .git/config"]),
            ),
            (
                "asked, nothing protected: no extra reason",
                ov(None),
                report(ran(0), &[]),
                Some(changed(&["unused"], &[])),
                ask_effects(&[]),
            ),
        ];
        for (name, plan, report, effects, want) in cases {
            let got = after_run(&plan, &report, effects.as_ref());
            assert_eq!(got, want, "{name}");
        }
        assert!(Next::Capture.records_run() && Next::Capture.keeps_layers());
        assert!(!Next::AskCommand {
            force_refused: false
        }
        .records_run());
        assert!(!Next::NoChanges("x").keeps_layers());
    }
}
