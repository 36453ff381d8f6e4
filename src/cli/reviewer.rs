//! `brainloop reviewer eval`: the configured `[reviewer]` measured against the operator's own
//! decisions (`hooks::eval` owns what is replayed and how it is counted; this module parses the
//! flags and prints). It opens every database read-only: an eval run changes no decision, no
//! evidence and no audit row.

use crate::config::Config;
use crate::db::{self, DbKind};
use crate::hooks::eval::{self, Report, Tally};
use crate::shown;
use anyhow::{bail, Context, Result};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ReviewerArgs {
    #[command(subcommand)]
    pub command: ReviewerCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ReviewerCommand {
    /// Replay the validations a human decided through the configured [reviewer] and count how
    /// it would have done.
    #[command(long_about = EVAL_ABOUT)]
    Eval(EvalArgs),
    /// With a fleet registry: run the configured [reviewer] over every worker's pending
    /// validations, deciding under the reviewer's PostgreSQL role (beside the operator's tools).
    #[command(long_about = FLEET_ABOUT)]
    Fleet(FleetArgs),
}

const FLEET_ABOUT: &str = "With `[registry] url` naming a login role of `brainloop_reviewer` (`brainloop registry add-role \
reviewer NAME`) and a `[reviewer]` section, run the reviewer command over every worker's pending, undecided \
validations in the registry, with the payload the worker published (what its own hooks get), confined as a worker \
runs it. Its `deny` is written as the reviewer's decision; its `approve` only when the payload shows a local change \
set whole (no generated content, no host, nothing cut) — and PostgreSQL refuses anything else a reviewer may not \
decide (`decided_by` must be the reviewer's, no learning, the first decision only, never a command or signature a \
human denied for that client). The worker that asked then holds an approve to its own limits (protected paths, its \
human denials, what a learned signature could apply): refused there, the human is asked. `ask`, a failure or a \
timeout leave it to the human. Runs until stopped (`--once`: one pass).";

#[derive(clap::Args, Debug)]
pub struct FleetArgs {
    /// One pass over the pending validations, then exit.
    #[arg(long)]
    pub once: bool,
    /// Between passes (ms).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub poll_ms: u64,
}

const EVAL_ABOUT: &str = "Replay the validations a human decided (approved or denied by a decision row a human wrote, \
never one the reviewer decided) through the configured [reviewer] command, run exactly as the worker runs it \
(confined, its hosts, its timeout), with the payload it would have received: the validation, its job's action and \
purpose, and the change set the human was shown (the copy kept when the human decided). Every database is opened \
read-only: nothing is decided, learned or audited.\n\n\
The reviewer's answer counts as what the worker would have done with it: an `approve` the worker refuses (generated \
content, a network request, anything cut from the payload, a protected path, a change set no learned signature could \
apply, a signature a human had denied for that client before the validation was asked) counts as `ask`.\n\n\
Counted in all and per operation signature:\n\
- agreement: the worker would have approved what the human approved, or denied what the human denied;\n\
- false approval: the worker would have approved what the human denied;\n\
- needless escalation: the human approved, but the reviewer answered `ask` (or anything unrecognised, a failure, a \
timeout, a refused approve: the human would have been asked) or `deny` (the job would have been denied); counted \
together and apart;\n\
- escalated denial: the reviewer asked the human, who denied.\n\n\
A validation whose change set or job row is gone is not replayed: it is listed with why.";

#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// Replay only the latest N decided validations (0: all).
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub limit: usize,
    /// Only validations asked within this long (e.g. 30m, 12h, 7d; a bare number is seconds).
    #[arg(long, value_name = "AGE")]
    pub since: Option<String>,
    /// Only this client's validations.
    #[arg(long, value_name = "NAME")]
    pub client: Option<String>,
    /// Print the report as JSON (counts in all and per signature, each validation replayed).
    #[arg(long)]
    pub json: bool,
}

/// `30m`, `12h`, `7d`, `45s`, or seconds (`time::parse_span_ms`).
pub(crate) fn parse_age(s: &str) -> Result<Duration> {
    let ms = crate::time::parse_span_ms(s).map_err(|e| anyhow::anyhow!("--since {e}"))?;
    Ok(Duration::from_millis(ms.max(0) as u64))
}

pub fn run(config: &Config, a: &ReviewerArgs) -> Result<i32> {
    match &a.command {
        ReviewerCommand::Eval(e) => eval_cmd(config, e),
        ReviewerCommand::Fleet(f) => fleet_cmd(config, f),
    }
}

/// `reviewer fleet`: the registry's pending validations through the configured reviewer, its
/// answers written under the reviewer's role (the statements are `ask::validations`', what a
/// reviewer may approve `hooks::reviewer`'s and the registry's).
fn fleet_cmd(config: &Config, a: &FleetArgs) -> Result<i32> {
    use crate::ask::validations::{self, Decision};
    use crate::hooks::Answer;
    let Some(reg) = config.registry.clone() else {
        bail!("`reviewer fleet` needs a fleet registry: set [registry] url to the reviewer's role (brainloop registry add-role reviewer NAME)");
    };
    let Some(reviewer) = config.reviewer.clone() else {
        bail!("no [reviewer] is configured: add a [reviewer] section with its command to the configuration (--config FILE)");
    };
    let mut settings = config.hooks();
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("data dir {}", config.data_dir.display()))?;
    settings.data_dir = std::fs::canonicalize(&config.data_dir)
        .with_context(|| format!("data dir {}", config.data_dir.display()))?;
    let helper = crate::sandbox::helper_exe()
        .context("cannot find the brainloop binary for the sandbox helper")?;
    let level = crate::sandbox::detect::probe(&helper).with_limits(&config.sandbox.limits);
    let llm_env = crate::hooks::llm_env(&settings);
    let cancel = tokio_util::sync::CancellationToken::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("brainloop-reviewer")
        .build()
        .context("cannot start the async runtime")?;
    let runner = crate::hooks::Runner {
        config: &settings,
        level: &level,
        llm_env: &llm_env,
        cancel: &cancel,
    };
    let by = crate::hooks::reviewer_decided_by(&reviewer.command);
    // Validations answered (or left to the human) by this run: asked once each.
    let mut seen = std::collections::HashSet::new();
    loop {
        let mut c = crate::registry::connect(&reg)?;
        crate::registry::check_version(&mut c)?;
        for f in validations::fleet_list(&mut c, true)? {
            let v = &f.validation;
            if v.status != "pending" || !seen.insert(v.id.clone()) {
                continue;
            }
            let Some(p) = validations::fleet_detail(&mut c, &v.id)? else {
                println!(
                    "{}: no payload published (an older worker): left to the human",
                    shown::line(&v.id)
                );
                continue;
            };
            let run = runtime.block_on(runner.run(&reviewer, &p, v.job_id));
            let (answer, reason) = crate::hooks::reviewer_answer(&run);
            let refusals = match answer {
                Answer::Approve => crate::hooks::payload_refusals(&p),
                _ => Vec::new(),
            };
            let applied = crate::hooks::reviewer_applied(answer, &refusals);
            let d = match applied {
                Answer::Approve => Decision::Approve,
                Answer::Deny => Decision::Deny,
                Answer::Ask => {
                    println!(
                        "{} (worker {}): {} — left to the human{}",
                        shown::line(&v.id),
                        shown::line(&f.worker),
                        answer.as_str(),
                        if refusals.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", shown::line(&refusals.join("; ")))
                        }
                    );
                    continue;
                }
            };
            let why = (!reason.is_empty()).then_some(reason.as_str());
            match validations::fleet_review(&mut c, &v.id, d, why, &by) {
                Ok(()) => println!(
                    "{} (worker {}): {} by the reviewer{}",
                    shown::line(&v.id),
                    shown::line(&f.worker),
                    d.as_str(),
                    why.map(|r| format!(": {}", shown::line(r)))
                        .unwrap_or_default()
                ),
                Err(e) => println!(
                    "{} (worker {}): the reviewer's {} is refused, left to the human: {}",
                    shown::line(&v.id),
                    shown::line(&f.worker),
                    d.as_str(),
                    shown::line(&format!("{e:#}"))
                ),
            }
        }
        if a.once {
            break;
        }
        std::thread::sleep(Duration::from_millis(a.poll_ms.max(50)));
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    crate::egress::sockdir::remove();
    Ok(0)
}

fn eval_cmd(config: &Config, a: &EvalArgs) -> Result<i32> {
    let Some(reviewer) = config.reviewer.clone() else {
        bail!("no [reviewer] is configured: add a [reviewer] section with its command to the configuration (--config FILE) to measure it");
    };
    let since_ms = match &a.since {
        Some(s) => Some(crate::time::now_ms() - parse_age(s)?.as_millis() as i64),
        None => None,
    };
    let mut settings = config.hooks();
    settings.data_dir = std::fs::canonicalize(&config.data_dir)
        .with_context(|| format!("data dir {}", config.data_dir.display()))?;
    if let Ok(w) = std::fs::canonicalize(&settings.workspace) {
        settings.workspace = w;
    }
    let output = db::open_read_only(&settings.data_dir, DbKind::Output)?;
    let security = db::open_read_only(&settings.data_dir, DbKind::Security)?;
    let lifecycle = db::open_read_only(&settings.data_dir, DbKind::Lifecycle)?;
    let helper = crate::sandbox::helper_exe()
        .context("cannot find the brainloop binary for the sandbox helper")?;
    let level = crate::sandbox::detect::probe(&helper).with_limits(&config.sandbox.limits);
    let llm_env = crate::hooks::llm_env(&settings);
    let cancel = tokio_util::sync::CancellationToken::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("brainloop-eval")
        .build()
        .context("cannot start the async runtime")?;
    let opts = eval::Options {
        limit: a.limit,
        since_ms,
        client: a.client.clone(),
    };
    let report = runtime.block_on(async {
        let runner = crate::hooks::Runner {
            config: &settings,
            level: &level,
            llm_env: &llm_env,
            cancel: &cancel,
        };
        let dbs = eval::Dbs {
            output: &output,
            security: &security,
            lifecycle: &lifecycle,
        };
        eval::run(&runner, &reviewer, &dbs, &opts).await
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    crate::egress::sockdir::remove();
    let report = report?;
    if a.json {
        println!("{}", shown::json(&report)?);
    } else {
        print!("{}", text(&report));
    }
    Ok(0)
}

fn counts(t: &Tally) -> String {
    format!(
        "{} replayed: agreement {} (approved {}, denied {}), false approvals {}, needless escalations {} (asked {}, denied {}), escalated denials {}",
        t.replayed,
        t.agreement,
        t.approved_agreed,
        t.denied_agreed,
        t.false_approvals,
        t.needless_escalations,
        t.needless_asks,
        t.needless_denials,
        t.escalated_denials
    )
}

/// The report for a human: agent-derived text escaped (`shown::line`).
fn text(r: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "reviewer eval of `{}`: {} validation(s) a human decided, {} replayed, {} not rebuilt",
        shown::line(&r.reviewer),
        r.selected,
        r.total.replayed,
        r.not_rebuilt.len()
    );
    let _ = writeln!(o, "in all: {}", counts(&r.total));
    if !r.per_signature.is_empty() {
        let _ = writeln!(o, "per signature:");
        for (sig, t) in &r.per_signature {
            let _ = writeln!(o, "  {}\n    {}", shown::line(sig), counts(t));
        }
    }
    for (what, v) in [
        ("false approvals", eval::Verdict::FalseApproval),
        ("needless escalations", eval::Verdict::NeedlessEscalation),
    ] {
        let rows: Vec<_> = r.validations.iter().filter(|x| x.verdict == v).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(o, "{what}:");
        for x in rows {
            let _ = writeln!(
                o,
                "  {} job {} client {}: {}\n    human {} ({}); reviewer {} ({}){}",
                x.validation_id,
                x.job_id,
                shown::line(&x.client),
                shown::line(x.command.as_deref().unwrap_or("")),
                x.human,
                shown::line(&x.decided_by),
                x.answer,
                shown::line(&x.reason),
                if x.applied != x.answer {
                    format!(
                        " → the worker would have asked: {}",
                        shown::line(&x.refusals.join("; "))
                    )
                } else {
                    String::new()
                }
            );
        }
    }
    if !r.not_rebuilt.is_empty() {
        let _ = writeln!(o, "not rebuilt (not replayed):");
        for x in &r.not_rebuilt {
            let _ = writeln!(
                o,
                "  {} job {} client {}: {}\n    {}",
                x.validation_id,
                x.job_id,
                shown::line(&x.client),
                shown::line(x.command.as_deref().unwrap_or("")),
                shown::line(&x.why)
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_with_their_unit() {
        assert_eq!(parse_age("45").unwrap(), Duration::from_secs(45));
        assert_eq!(parse_age("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_age("7d").unwrap(), Duration::from_secs(7 * 86400));
        assert!(parse_age("7w").is_err());
        assert!(parse_age("d").is_err());
    }
}
