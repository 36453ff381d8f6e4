//! The `[reviewer]` command (issue 22): this module owns *what a reviewer may decide*. It reads
//! the validation JSON on stdin and answers on stdout `deny`, `ask` or `approve` — a first line
//! `WORD [reason]`, or `{"decision": WORD, "reason": "..."}`. Then:
//!
//! - `deny` ends the job `denied` (a decision row like an operator's, `decided_by` naming the
//!   reviewer);
//! - `approve` is accepted only for a **local, fully shown** change set ([`approve_refusals`],
//!   table-tested): the job's action does not generate content (`run_code`, `generate_file`,
//!   `generate_sql`), no host was asked for, reached or tried (egress proxy), the payload the
//!   reviewer read cut nothing (`payload::cut`: purpose, diff, output, a file not shown whole —
//!   binary, too large, past a cap), no changed path is protected, and a learned signature could
//!   apply it (`bash::learn::refusals`: workspace only, every path named, nothing dynamic; a
//!   validation without a change set is refused there), and no signature of it a human denied
//!   for that client ([`human_denied`]: a human's `deny` / `never` decision row, or
//!   `signature_evidence.denials` — `override clear` forgets the latter, never the former).
//!   Anything else: the human is asked — for network requests and generated content a reviewer
//!   may deny or escalate, never approve;
//! - `ask`, anything unrecognised, a non-zero exit, an error or a timeout: the human is asked.
//!
//! After `escalate_after_denials` reviewer denials in a row for one client ([`denial_streak`],
//! read from the decision rows: it survives a restart; a human decision or a reviewer approve for
//! the client ends it), `[notify]` runs with `"event": "reviewer_denials"` ([`Streak::payload`]),
//! and again at every further multiple.
//!
//! Every answer is audited (metadata `events`, kind `reviewer`) with its reason, what was done
//! with it and `decided_by`; a decision row it writes has `decided_by` starting with
//! [`REVIEWER_PREFIX`], which is how every surface marks it as the reviewer's. A reviewer's
//! decision is never learning evidence (`ask::By::Reviewer`).

use super::Hooks;
use crate::ask::validations::{self, Decision, Validation};
use crate::ask::REVIEWER_PREFIX;
use crate::bash::executor::ExecResult;
use serde_json::{json, Value};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Deny,
    Ask,
    Approve,
}

impl Answer {
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Deny => "deny",
            Answer::Ask => "ask",
            Answer::Approve => "approve",
        }
    }
}

/// The reviewer's answer and its reason, from its output.
pub fn parse(stdout: &str) -> (Answer, String) {
    let t = stdout.trim();
    let (word, reason) = match serde_json::from_str::<Value>(t) {
        Ok(v) if v.is_object() => (
            v["decision"].as_str().unwrap_or("").to_string(),
            v["reason"].as_str().unwrap_or("").to_string(),
        ),
        _ => {
            let mut it = t.splitn(2, char::is_whitespace);
            (
                it.next().unwrap_or("").to_string(),
                it.next().unwrap_or("").trim().to_string(),
            )
        }
    };
    match word.to_ascii_lowercase().as_str() {
        "deny" => (Answer::Deny, reason),
        "approve" => (Answer::Approve, reason),
        "ask" => (Answer::Ask, reason),
        _ => (
            Answer::Ask,
            format!(
                "unrecognised answer {:?}",
                crate::quote::prefix(t, crate::quote::VALUE_MAX)
            ),
        ),
    }
}

/// What the worker knows of a validation when its reviewer answers `approve`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Facts {
    /// The waiting job's action (`execute_bash`, `run_code`, `generate_file`, …).
    pub action: Option<String>,
    /// What the payload the reviewer read says it cut (`payload::cut`).
    pub cut: Vec<String>,
    /// Hosts the validation asks for, or the job's runs reached or tried (egress proxy).
    pub hosts: Vec<String>,
    /// Changed paths the protected-path table matches (`PATH (PATTERN)`).
    pub protected: Vec<String>,
    /// Why a learned signature could not apply the change set (`bash::learn::refusals`; says so
    /// when there is no change set).
    pub learn: Vec<String>,
    /// The change set's signatures a human denied for this client ([`human_denied`]), each
    /// with where the denial is recorded.
    pub human_denied: Vec<String>,
    /// The validation is about content a model generated (`payload`'s `generated`: a
    /// `generate_file`, `generate_sql` or a loop's write), whatever the job's action.
    pub generated: Option<String>,
    /// The permission set of what it would run (no change set: asked up front, or a host
    /// request), when that set has network.
    pub network_set: Option<String>,
}

/// Actions whose validations show generated content (a model's file or SQL, a program's tool
/// calls) rather than a command's change set: a reviewer never approves them.
pub const GENERATED: &[&str] = &["run_code", "generate_file", "generate_sql"];

/// Why a reviewer's `approve` may not be applied (empty: it may). The one place that says what a
/// reviewer may approve: a local, fully shown change set with no protected path and no host.
pub fn approve_refusals(f: &Facts) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(a) = f.action.as_deref().filter(|a| GENERATED.contains(a)) {
        out.push(format!(
            "the job's action {a} generates what it asks about: a reviewer may deny or ask, never approve"
        ));
    }
    if let Some(g) = &f.generated {
        out.push(format!(
            "the validation is about generated content ({g}): a reviewer may deny or ask, never approve"
        ));
    }
    if let Some(set) = &f.network_set {
        out.push(format!(
            "network: what it runs has network (set {set}) — a reviewer may deny or ask, never approve"
        ));
    }
    if !f.hosts.is_empty() {
        out.push(format!(
            "network: the job asks for or reached {} — a reviewer may deny or ask, never approve",
            f.hosts.join(", ")
        ));
    }
    out.extend(
        f.cut
            .iter()
            .map(|c| format!("the reviewer was not shown everything: {c}")),
    );
    out.extend(
        f.protected
            .iter()
            .map(|p| format!("touches a protected path: {p}")),
    );
    out.extend(f.learn.iter().cloned());
    out.extend(f.human_denied.iter().map(|d| {
        format!("a human denied {d}: a reviewer never approves a signature a human denied for that client")
    }));
    let mut seen = std::collections::HashSet::new();
    out.retain(|r| seen.insert(r.clone()));
    out
}

/// What is done with a reviewer's answer, given [`approve_refusals`]: an `approve` with any
/// refusal becomes `ask`; `deny` and `ask` stand.
pub fn applied(answer: Answer, refusals: &[String]) -> Answer {
    match answer {
        Answer::Approve if !refusals.is_empty() => Answer::Ask,
        a => a,
    }
}

/// What the run of the reviewer says (`Ask` on any failure).
pub fn answer_of(r: &anyhow::Result<ExecResult>) -> (Answer, String) {
    match r {
        Err(e) => (Answer::Ask, format!("the reviewer could not run: {e:#}")),
        Ok(r) if r.timed_out => (Answer::Ask, "the reviewer timed out".into()),
        Ok(r) if !r.success() => (
            Answer::Ask,
            format!(
                "the reviewer failed (exit {:?}): {}",
                r.exit_code,
                crate::quote::prefix(r.stderr.trim(), crate::quote::VALUE_MAX)
            ),
        ),
        Ok(r) => parse(&r.stdout),
    }
}

/// What `validations` and `show` say of who decided `v` — marked as the reviewer's when its
/// reviewer did — and, while the human decides, what the reviewer answered and why it was not
/// applied. `metadata` (the reviewer's audit events) may be missing.
pub fn marks(
    security: &rusqlite::Connection,
    metadata: Option<&rusqlite::Connection>,
    v: &Validation,
) -> anyhow::Result<Vec<String>> {
    let short = |s: &str| crate::quote::prefix(s, crate::quote::VALUE_MAX);
    let mut out = Vec::new();
    if let Some(d) = validations::first_decision(security, &v.id)? {
        let word = d.decision.map(|d| d.as_str()).unwrap_or("?");
        let reason = d
            .reason
            .as_deref()
            .map(|r| format!(": {}", short(r)))
            .unwrap_or_default();
        out.push(match crate::ask::By::of(&d.decided_by) {
            crate::ask::By::Reviewer => format!(
                "REVIEWER's decision ({}): {word}{reason} — not a human's",
                short(&d.decided_by)
            ),
            crate::ask::By::Human => format!("decided by {}: {word}{reason}", short(&d.decided_by)),
        });
        return Ok(out);
    }
    let Some(m) = metadata else {
        return Ok(out);
    };
    let said = crate::db::metadata::events_of(m, "reviewer", v.job_id)?
        .into_iter()
        .rfind(|e| e["validation_id"] == v.id.as_str());
    if let Some(e) = said {
        let s = |k: &str| e[k].as_str().unwrap_or("?").to_string();
        let refusals: Vec<String> = e["refusals"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_str()).map(short).collect())
            .unwrap_or_default();
        let mut line = format!(
            "the REVIEWER answered {} ({})",
            s("answer"),
            short(&s("reason"))
        );
        if s("applied") == "ask" {
            line.push_str(" — not applied, a human decides");
            if !refusals.is_empty() {
                line.push_str(&format!(": {}", refusals.join("; ")));
            }
        }
        out.push(line);
    }
    Ok(out)
}

/// What [`approve_refusals`] can judge from a published payload alone (the fleet's reviewer,
/// beside the operator's tools, has no worker's data dir): the job's action, what the payload
/// cut, the hosts it names, generated content. The registry (`brainloop_reviewer_may`) and the
/// worker that asked (`refusals_now`) judge the rest.
pub fn payload_refusals(p: &Value) -> Vec<String> {
    let hosts = p["network"]["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h.as_str().map(str::to_string))
        .collect::<Vec<_>>();
    let mut f = Facts {
        action: p["action"].as_str().map(str::to_string),
        cut: super::payload::cut(p),
        hosts,
        generated: p["generated"]["path"].as_str().map(str::to_string),
        ..Facts::default()
    };
    if !p["network"].is_null() && f.hosts.is_empty() {
        f.hosts.push("(a host request)".into());
    }
    if p["kind"].as_str() != Some("change_set") {
        f.learn.push(format!(
            "the validation is of kind {}, not a change set: a reviewer approves only a change set shown whole",
            p["kind"].as_str().unwrap_or("unknown")
        ));
    }
    approve_refusals(&f)
}

/// The `decided_by` of the reviewer running `command` ([`REVIEWER_PREFIX`], as on a worker).
pub fn decided_by(command: &str) -> String {
    format!(
        "{REVIEWER_PREFIX} {}",
        crate::quote::prefix(command, crate::quote::VALUE_MAX)
    )
}

/// Why this worker refuses an approve of `v` by a reviewer that read payload `p` (the fleet's
/// reviewer decides beside the operator's tools, from what the worker published: the worker
/// holds its approve to the same limits as its own reviewer's, `ask::fleet`).
pub fn refusals_now(
    security: &rusqlite::Connection,
    output: &rusqlite::Connection,
    paths: &crate::permset::PathLists,
    data_dir: &std::path::Path,
    v: &Validation,
    p: &Value,
) -> Vec<String> {
    let facts = crate::bash::changes::load_manifest(data_dir, v.job_id)
        .and_then(|m| facts_of(security, output, paths, v, p, m.as_ref(), When::Now));
    match facts {
        Ok(f) => approve_refusals(&f),
        Err(e) => vec![format!("cannot check the change set: {e:#}")],
    }
}

/// Which human denials [`facts_of`] counts against a reviewer's approve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// The worker, now: every human denial recorded (`signature_evidence.denials` and the
    /// decision rows), and `bash::learn`'s stored denials.
    Now,
    /// `brainloop reviewer eval`: the human denials of decision rows written before the
    /// validation was asked (never the replayed decision itself, nor a later one).
    AsAsked,
}

/// What [`approve_refusals`] judges for `v`, the payload `p` its reviewer read and its change set
/// `m` (the one on disk, or the copy the eval replays): the one computation the worker and the
/// eval share.
pub fn facts_of(
    security: &rusqlite::Connection,
    output: &rusqlite::Connection,
    paths: &crate::permset::PathLists,
    v: &Validation,
    p: &Value,
    m: Option<&crate::bash::changes::Manifest>,
    when: When,
) -> anyhow::Result<Facts> {
    let table = crate::bash::protected::Table::shared(paths)?;
    let learn = crate::bash::learn::refusals_with(security, m, v, &table, when == When::Now)?;
    let protected = m
        .map(|m| {
            let report = crate::classify::check(
                &m.command,
                &crate::classify::Context {
                    workdir: Some(m.workdir.clone()),
                },
            );
            let judged = crate::bash::protected::judge(
                &table,
                &m.change_set,
                &m.workspace,
                Some((&report, &m.workdir)),
            );
            judged
                .hits
                .iter()
                .map(|h| format!("{} (rule {})", h.path, h.rule))
                .collect()
        })
        .unwrap_or_default();
    let mut hosts: Vec<String> = crate::egress::store::request(security, &v.id)?
        .map(|r| r.hosts)
        .unwrap_or_default();
    for conn in crate::egress::store::of_job(security, v.job_id)? {
        let h = format!("{}:{} ({})", conn.host, conn.port, conn.outcome);
        if !hosts.contains(&h) {
            hosts.push(h);
        }
    }
    let sigs = signatures_of(security, v, m)?;
    let before = match when {
        When::Now => None,
        When::AsAsked => Some(v.requested_at),
    };
    let mut human_denied = human_denied(security, output, &v.client_id, &sigs, before)?;
    if when == When::Now {
        for (sig, n) in crate::bash::signatures::human_denials(security, &v.client_id, &sigs)? {
            let d = format!(
                "`{sig}` for client {} ({n} denial(s) in its evidence)",
                v.client_id
            );
            if !human_denied
                .iter()
                .any(|x| x.starts_with(&format!("`{sig}` ")))
            {
                human_denied.push(d);
            }
        }
    }
    let generated = p["generated"].as_object().map(|g| {
        format!(
            "{} of {}",
            g.get("action").and_then(Value::as_str).unwrap_or("?"),
            g.get("path").and_then(Value::as_str).unwrap_or("?")
        )
    });
    // A change set was captured on the overlay (what it reached is in `hosts`); anything else
    // runs, or re-runs, with the network of its set.
    let network_set = v
        .permission_set
        .as_deref()
        .filter(|_| p["change_set"].is_null())
        .filter(|s| crate::permset::parse(s).is_ok_and(|s| s.network()))
        .map(str::to_string);
    Ok(Facts {
        action: p["action"].as_str().map(str::to_string),
        cut: super::payload::cut(p),
        hosts,
        protected,
        learn,
        human_denied,
        generated,
        network_set,
    })
}

/// The operation signatures validation `v` is about: what the worker recorded for its job
/// (`job_signatures`), else its change set's.
pub fn signatures_of(
    security: &rusqlite::Connection,
    v: &Validation,
    m: Option<&crate::bash::changes::Manifest>,
) -> anyhow::Result<Vec<String>> {
    Ok(match crate::bash::signatures::of_job(security, v.job_id)? {
        Some(j) => j.signatures,
        None => m.map(|m| m.signatures.clone()).unwrap_or_default(),
    })
}

/// Of `sigs`, those a human denied for `client` by a decision row (`deny` or `never` written by
/// a human, about a validation of that client whose job covered the signature); `before`: only
/// rows written before then. Each as "`SIG` for client C (validation ID)".
pub fn human_denied(
    security: &rusqlite::Connection,
    output: &rusqlite::Connection,
    client: &str,
    sigs: &[String],
    before: Option<i64>,
) -> anyhow::Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    if sigs.is_empty() {
        return Ok(out);
    }
    for row in validations::human_denials(security)? {
        if before.is_some_and(|b| row.created_at >= b) {
            continue;
        }
        let Some(denied) = validations::get(output, &row.validation_id)? else {
            continue;
        };
        if denied.client_id != client {
            continue;
        }
        let Some(theirs) = crate::bash::signatures::of_job(security, denied.job_id)? else {
            continue;
        };
        let theirs = theirs.signatures;
        for s in sigs.iter().filter(|s| theirs.contains(s)) {
            if !out.iter().any(|x| x.starts_with(&format!("`{s}` "))) {
                out.push(format!(
                    "`{s}` for client {client} (validation {})",
                    denied.id
                ));
            }
        }
    }
    Ok(out)
}

/// How many of a client's latest validations a streak of reviewer denials is looked for in.
pub const STREAK_WINDOW: usize = 200;

/// A client's reviewer denials in a row, newest first: (validation, the reviewer's reason).
#[derive(Debug, Clone, Default)]
pub struct Streak {
    pub client: String,
    pub denied: Vec<(Validation, Option<String>)>,
}

impl Streak {
    pub fn denials(&self) -> usize {
        self.denied.len()
    }

    /// The `[notify]` payload: `"event": "reviewer_denials"`, the client, how many, each
    /// validation (id, job, command, the reviewer's reason) and `text`, the same for a human to
    /// read with every agent-derived value escaped (`shown::line`).
    pub fn payload(&self, data_dir: &std::path::Path, every: u32) -> Value {
        use crate::shown::line;
        let n = self.denials();
        let mut text = format!(
            "brainloop: the reviewer denied the last {n} validations of client {} in a row (escalate_after_denials = {every}); no human has decided for this client since:\n",
            line(&self.client)
        );
        for (v, why) in &self.denied {
            text.push_str(&format!(
                "- {} (job {}): {} — {}\n",
                v.id,
                v.job_id,
                line(v.command.as_deref().unwrap_or("")),
                line(why.as_deref().unwrap_or(""))
            ));
        }
        let cli = format!("brainloop --data-dir {}", data_dir.display());
        text.push_str(&format!("{cli} validations --all"));
        json!({
            "event": "reviewer_denials",
            "client": self.client,
            "denials": n,
            "escalate_after_denials": every,
            "validations": self.denied.iter().map(|(v, why)| json!({
                "id": v.id,
                "job_id": v.job_id,
                "command": v.command,
                "reason": why,
                "show": format!("{cli} show {}", v.id),
            })).collect::<Vec<_>>(),
            "text": text,
        })
    }
}

/// The clients whose reviewer denied `every` or more of their validations in a row (what
/// `validations` and `status` show while it lasts); none when `every` is 0.
pub fn escalated(
    security: &rusqlite::Connection,
    output: &rusqlite::Connection,
    every: u32,
) -> anyhow::Result<Vec<Streak>> {
    if every == 0 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for client in validations::clients(output)? {
        let s = denial_streak(security, output, &client)?;
        if s.denials() >= every as usize {
            out.push(s);
        }
    }
    Ok(out)
}

/// The reviewer's denials of `client`'s validations since the latest human decision or reviewer
/// approve for that client (newest first; a reviewer's `ask` neither counts nor resets): derived
/// from the decision rows (`approvals`, by the order they were written) of the client's latest
/// [`STREAK_WINDOW`] validations, so it survives a restart.
pub fn denial_streak(
    security: &rusqlite::Connection,
    output: &rusqlite::Connection,
    client: &str,
) -> anyhow::Result<Streak> {
    let mut rows = Vec::new();
    for v in validations::of_client(output, client, STREAK_WINDOW)? {
        for d in validations::decisions_of(security, &v.id)? {
            rows.push((d, v.clone()));
        }
    }
    rows.sort_by_key(|(d, _)| std::cmp::Reverse(d.row_id));
    let mut denied = Vec::new();
    for (d, v) in rows {
        let reviewer = crate::ask::By::of(&d.decided_by) == crate::ask::By::Reviewer;
        let denies = d.decision.is_some_and(|x| !x.runs());
        if !(reviewer && denies) {
            break;
        }
        if !denied.iter().any(|(x, _): &(Validation, _)| x.id == v.id) {
            denied.push((v, d.reason));
        }
    }
    Ok(Streak {
        client: client.to_string(),
        denied,
    })
}

impl Hooks {
    /// Consults the reviewer about a new validation; true when it settled it (deny, or an
    /// accepted approve), so the human need not be notified.
    pub(super) async fn review(&self, v: &Validation, p: &Value) -> bool {
        let Some(h) = &self.config.reviewer else {
            return false;
        };
        let run = self.run_hook(h, p, v.job_id).await;
        let (answer, reason) = answer_of(&run);
        let refusals = match answer {
            Answer::Approve => approve_refusals(&self.facts(v, p).await),
            _ => Vec::new(),
        };
        let applied = applied(answer, &refusals);
        let by = decided_by(&h.command);
        let recorded = match applied {
            Answer::Ask => Ok(()),
            a => self.record(v, a, &reason, &by).await,
        };
        let detail = json!({
            "validation_id": v.id,
            "answer": answer.as_str(),
            "applied": applied.as_str(),
            "reason": reason,
            "refusals": refusals,
            "decided_by": by,
            "cut": super::payload::cut(p),
            "exit_code": run.as_ref().ok().and_then(|r| r.exit_code),
            "timed_out": run.as_ref().is_ok_and(|r| r.timed_out),
            "recorded": recorded.as_ref().map(|_| true).unwrap_or(false),
        });
        tracing::info!(validation_id = %v.id, answer = answer.as_str(), applied = applied.as_str(), reason = %reason, "reviewer");
        let (stores, job) = (Arc::clone(&self.stores), v.job_id);
        if let Err(e) = stores
            .metadata
            .call(move |c| crate::db::metadata::insert_event(c, "reviewer", Some(job), &detail))
            .await
        {
            tracing::warn!(
                error = format!("{e:#}"),
                "cannot audit the reviewer's decision"
            );
        }
        if let Err(e) = &recorded {
            tracing::warn!(error = format!("{e:#}"), validation_id = %v.id, "cannot record the reviewer's decision; asking the human");
            return false;
        }
        if applied == Answer::Deny {
            self.escalate(v, h.escalate_after_denials).await;
        }
        applied != Answer::Ask
    }

    /// What [`approve_refusals`] judges, for `v` and the payload `p` its reviewer read.
    async fn facts(&self, v: &Validation, p: &Value) -> Facts {
        let (dd, pp, v2, p2, stores) = (
            self.config.data_dir.clone(),
            self.config.paths.clone(),
            v.clone(),
            p.clone(),
            Arc::clone(&self.stores),
        );
        let res = self
            .stores
            .security
            .call(move |c| {
                let out = stores
                    .output_readers
                    .get()
                    .map_err(|e| anyhow::anyhow!("no output.db reader: {e}"))?;
                let m = crate::bash::changes::load_manifest(&dd, v2.job_id)?;
                facts_of(c, &out, &pp, &v2, &p2, m.as_ref(), When::Now)
            })
            .await;
        res.unwrap_or_else(|e| Facts {
            action: p["action"].as_str().map(str::to_string),
            cut: super::payload::cut(p),
            learn: vec![format!("cannot check the change set: {e:#}")],
            ..Facts::default()
        })
    }

    /// After a reviewer denial of `v`: when the client's streak of reviewer denials reaches a
    /// multiple of `escalate_after_denials`, `[notify]` says so (`"event": "reviewer_denials"`).
    async fn escalate(&self, v: &Validation, every: u32) {
        if every == 0 {
            return;
        }
        let (stores, client) = (Arc::clone(&self.stores), v.client_id.clone());
        let streak = self
            .stores
            .security
            .call(move |c| {
                let out = stores
                    .output_readers
                    .get()
                    .map_err(|e| anyhow::anyhow!("no output.db reader: {e}"))?;
                denial_streak(c, &out, &client)
            })
            .await;
        let streak = match streak {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), client = %v.client_id, "cannot count the reviewer's denials in a row");
                return;
            }
        };
        let n = streak.denials();
        if n == 0 || n % every as usize != 0 {
            return;
        }
        tracing::warn!(client = %v.client_id, denials = n, "the reviewer denied {n} validations of this client in a row: telling the human");
        if self.config.notify.is_none() {
            tracing::warn!(client = %v.client_id, "no [notify] command to tell the human that the reviewer keeps denying");
            return;
        }
        let p = streak.payload(&self.config.data_dir, every);
        self.notify_of(&v.id, v.job_id, &p).await;
    }

    async fn record(
        &self,
        v: &Validation,
        a: Answer,
        reason: &str,
        by: &str,
    ) -> anyhow::Result<()> {
        let d = match a {
            Answer::Deny => Decision::Deny,
            _ => Decision::Approve,
        };
        let (id, reason, by) = (v.id.clone(), reason.to_string(), by.to_string());
        self.stores
            .security
            .call(move |c| validations::record(c, &id, d, false, Some(&reason), &by))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_strictly_and_anything_else_asks() {
        assert_eq!(parse("deny the diff edits .bashrc\n").0, Answer::Deny);
        assert_eq!(
            parse("deny the diff edits .bashrc\n").1,
            "the diff edits .bashrc"
        );
        assert_eq!(parse("APPROVE\n").0, Answer::Approve);
        assert_eq!(
            parse(r#"{"decision": "approve", "reason": "matches"}"#),
            (Answer::Approve, "matches".to_string())
        );
        assert_eq!(parse("ask").0, Answer::Ask);
        assert_eq!(parse("").0, Answer::Ask);
        assert_eq!(parse("approved!").0, Answer::Ask);
        assert_eq!(parse(r#"{"decision": 1}"#).0, Answer::Ask);
    }

    /// What a reviewer's answer becomes, per fact: only a local, fully shown change set with no
    /// protected path and no host takes an `approve`; `deny` and `ask` always stand. Long because
    /// it is one table, a row per fact.
    #[test]
    fn a_reviewer_approves_only_local_fully_shown_unprotected_change_sets() {
        let ok = Facts {
            action: Some("execute_bash".into()),
            ..Facts::default()
        };
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let rows: Vec<(&str, Facts, Option<&str>)> = vec![
            ("local, fully shown", ok.clone(), None),
            (
                "an agent loop's command",
                Facts {
                    action: Some("loop".into()),
                    ..ok.clone()
                },
                None,
            ),
            (
                "no job row",
                Facts {
                    action: None,
                    ..ok.clone()
                },
                None,
            ),
            (
                "run_code",
                Facts {
                    action: Some("run_code".into()),
                    ..ok.clone()
                },
                Some("run_code generates"),
            ),
            (
                "generate_file",
                Facts {
                    action: Some("generate_file".into()),
                    ..ok.clone()
                },
                Some("generate_file generates"),
            ),
            (
                "generate_sql",
                Facts {
                    action: Some("generate_sql".into()),
                    ..ok.clone()
                },
                Some("generate_sql generates"),
            ),
            (
                "a host request",
                Facts {
                    hosts: s(&["example.org:443"]),
                    ..ok.clone()
                },
                Some("network: the job asks for or reached example.org:443"),
            ),
            (
                "a host reached",
                Facts {
                    hosts: s(&["127.0.0.1:9 (allowed)"]),
                    ..ok.clone()
                },
                Some("network:"),
            ),
            (
                "the diff cut",
                Facts {
                    cut: s(&["change_set.diff: the diff stops at its cap"]),
                    ..ok.clone()
                },
                Some("not shown everything: change_set.diff"),
            ),
            (
                "a binary file",
                Facts {
                    cut: s(&["change_set.paths: the diff does not show \"x.bin\" whole"]),
                    ..ok.clone()
                },
                Some("x.bin"),
            ),
            (
                "the purpose cut",
                Facts {
                    cut: s(&["purpose: cut at 4000 bytes"]),
                    ..ok.clone()
                },
                Some("purpose: cut"),
            ),
            (
                "a protected path",
                Facts {
                    protected: s(&[".envrc (.envrc)"]),
                    ..ok.clone()
                },
                Some("protected path: .envrc"),
            ),
            (
                "a signature a human denied for the client",
                Facts {
                    human_denied: s(&["`sed -i EXPR WS_PATH` for client local (validation v1)"]),
                    ..ok.clone()
                },
                Some("a human denied `sed -i EXPR WS_PATH` for client local"),
            ),
            (
                "a loop's write of generated content",
                Facts {
                    action: Some("loop".into()),
                    generated: Some("write of /ws/a.py".into()),
                    ..ok.clone()
                },
                Some("generated content (write of /ws/a.py)"),
            ),
            (
                "a command with network asked up front",
                Facts {
                    network_set: Some("network-api".into()),
                    ..ok.clone()
                },
                Some("set network-api"),
            ),
            (
                "no change set",
                Facts {
                    learn: s(&["there is no change set"]),
                    ..ok.clone()
                },
                Some("there is no change set"),
            ),
        ];
        for (name, f, why) in rows {
            let r = approve_refusals(&f);
            match why {
                None => {
                    assert!(r.is_empty(), "{name}: {r:?}");
                    assert_eq!(applied(Answer::Approve, &r), Answer::Approve, "{name}");
                }
                Some(w) => {
                    assert!(r.iter().any(|x| x.contains(w)), "{name}: {r:?}");
                    assert_eq!(applied(Answer::Approve, &r), Answer::Ask, "{name}");
                }
            }
            assert_eq!(applied(Answer::Deny, &r), Answer::Deny, "{name}");
            assert_eq!(applied(Answer::Ask, &r), Answer::Ask, "{name}");
        }
        // Every refusal is said once, even when two checks find the same thing.
        let f = Facts {
            protected: s(&["a"]),
            learn: s(&["touches a protected path: a"]),
            ..ok
        };
        assert_eq!(approve_refusals(&f).len(), 1);
    }
}
