//! Operator commands for command security (DESIGN §7): `validations`, `approve ID [--always]`,
//! `deny ID [--always]`, `commands`, `override HASH always_allow|always_ask|never|clear`.
//! Decisions are written to command_security.db, which only the operator and the worker can
//! write; the worker consumes each approval once (see `ask::answers`).

use crate::ask::validations::{self, Decision};
use crate::bash::policy::Override;
use crate::bash::registry;
use crate::bash::signatures;
use crate::bash::{changes, journal};
use crate::config::Config;
use crate::db::{self, DbKind};
use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct ValidationsArgs {
    /// Include decided and expired validations.
    #[arg(long)]
    pub all: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct DecideArgs {
    /// The validation id (from `brainloop validations`, or the job's result).
    pub id: String,
    /// Also set the command's override: `approve --always` → always_allow, `deny --always` → never.
    #[arg(long)]
    pub always: bool,
    /// Why (kept with the decision).
    #[arg(long)]
    pub reason: Option<String>,
    /// `approve` only: also learn the change set's signatures for the job's client at once
    /// (refused, saying why, for what a learned signature could never apply).
    #[arg(long)]
    pub learn: bool,
    /// approve only: allow HOST:PORT (globs `*.example.org:443`) through the egress proxy for
    /// this client's command; repeatable. A host request approved without it allows the hosts
    /// it names.
    #[arg(long = "host", value_name = "HOST:PORT")]
    pub hosts: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct CommandsArgs {
    #[arg(long)]
    pub json: bool,
    /// Show one command's policy history (hash or unique prefix).
    #[arg(long, value_name = "HASH")]
    pub history: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct OverrideArgs {
    /// Command hash (or a unique prefix), from `brainloop commands` or `brainloop check`; or a
    /// signature id from `brainloop signatures` (`sig:N`, or `N` when no command hash matches).
    pub hash: String,
    /// always_allow, always_ask, never, or clear.
    pub value: String,
    #[arg(long)]
    pub reason: Option<String>,
}

fn open(config: &Config, kind: DbKind) -> Result<rusqlite::Connection> {
    if !kind.path(&config.data_dir).exists() {
        bail!(
            "{} does not exist: run `brainloop init` first",
            kind.path(&config.data_dir).display()
        );
    }
    db::open(&config.data_dir, kind)
}

pub fn validations(config: &Config, a: &ValidationsArgs) -> Result<i32> {
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    let list = validations::list(&out, !a.all)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(0);
    }
    if list.is_empty() {
        println!("no {}validations", if a.all { "" } else { "pending " });
    }
    let now = crate::time::now_ms();
    for v in list {
        println!(
            "{}  job {}  client {}  [{}]",
            v.id, v.job_id, v.client_id, v.status
        );
        println!(
            "  command:  {}",
            v.command
                .as_deref()
                .unwrap_or("")
                .replace('\n', "\n            ")
        );
        println!(
            "  policy {}   risk {:.2}   set {}   {}",
            v.policy.as_deref().unwrap_or("?"),
            v.risk_score.unwrap_or(0.0),
            v.permission_set.as_deref().unwrap_or("?"),
            v.expires_at
                .filter(|_| v.status == "pending")
                .map(|t| format!("expires in {} min", (t - now).max(0) / 60_000))
                .unwrap_or_default()
        );
        let reasons: Vec<String> = v
            .reasons
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_default();
        for r in reasons {
            println!("  - {r}");
        }
        if v.status == "pending" {
            println!(
                "  → brainloop approve {} [--always]   |   brainloop deny {} [--always]",
                v.id, v.id
            );
        }
    }
    Ok(0)
}

pub fn decide(config: &Config, a: &DecideArgs, approve: bool) -> Result<i32> {
    if !approve && !a.hosts.is_empty() {
        bail!("--host goes with approve (deny refuses the request as a whole)");
    }
    let hosts = a
        .hosts
        .iter()
        .map(|h| crate::egress::rules::HostRule::parse(h, "approved").map(|r| r.text()))
        .collect::<Result<Vec<String>, String>>()
        .map_err(|e| anyhow::anyhow!(e))?;
    // The host request as it stood before the decision.
    let request = crate::egress::store::request(&open(config, DbKind::Security)?, &a.id)?;
    let (d, v) = record_decision(
        config,
        &a.id,
        approve,
        a.always,
        a.learn,
        a.reason.as_deref(),
    )?;
    println!(
        "{} validation {} (job {}): {}",
        d.as_str(),
        v.id,
        v.job_id,
        v.command.as_deref().unwrap_or("")
    );
    if a.learn {
        println!(
            "and learn its signatures for client {}: {}",
            v.client_id,
            crate::bash::learn::signatures_of(&config.data_dir, v.job_id)?.join(" | ")
        );
    }
    if approve {
        approve_hosts(&mut open(config, DbKind::Security)?, &v, request, hosts)?;
    }
    println!("the worker applies it within seconds (`brainloop enqueue get_result` / results table for the outcome)");
    Ok(0)
}

/// One operator decision (`approve` / `deny` and `review`): `--learn` is checked first and
/// refused, nothing decided, for what a learned signature could never apply (`bash::learn`).
pub(crate) fn record_decision(
    config: &Config,
    id: &str,
    approve: bool,
    always: bool,
    learn: bool,
    reason: Option<&str>,
) -> Result<(Decision, validations::Validation)> {
    let d = match (approve, always) {
        (true, false) => Decision::Approve,
        (true, true) => Decision::AlwaysAllow,
        (false, false) => Decision::Deny,
        (false, true) => Decision::Never,
    };
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    let mut sec = open(config, DbKind::Security)?;
    if learn {
        if d != Decision::Approve {
            bail!("--learn goes with `approve ID` alone (not with deny or --always)");
        }
        refuse_learning(config, id, &sec, &out)?;
    }
    let v = validations::decide(&mut sec, &out, id, d, learn, reason, &super::operator())?;
    Ok((d, v))
}

/// `--learn` is for a change set a learned signature could apply (`bash::learn`).
fn refuse_learning(
    config: &Config,
    id: &str,
    sec: &rusqlite::Connection,
    out: &rusqlite::Connection,
) -> Result<()> {
    let Some(v) = validations::get(out, id)? else {
        bail!("no validation {id} (see `brainloop validations`)");
    };
    let protected = crate::bash::protected::Table::shared(&config.path_lists())?;
    let why = crate::bash::learn::refusals(sec, &config.data_dir, &v, &protected)?;
    if !why.is_empty() {
        bail!(
            "--learn refused for validation {}, nothing decided (approve it without --learn to run it once):\n  - {}",
            v.id,
            why.join("\n  - ")
        );
    }
    Ok(())
}

/// The hosts a human allows with an approval: `--host` values, or those of the host request.
/// Recorded for the client's command (its hash: the request's, or an up-front validation's).
fn approve_hosts(
    sec: &mut rusqlite::Connection,
    v: &validations::Validation,
    request: Option<crate::egress::store::Request>,
    hosts: Vec<String>,
) -> Result<()> {
    let hosts = match (&request, hosts.is_empty()) {
        (Some(r), true) => r.hosts.clone(),
        _ => hosts,
    };
    if hosts.is_empty() {
        return Ok(());
    }
    let hash = match &request {
        Some(r) => r.command_hash.clone(),
        None => v.command_hash.clone().unwrap_or_default(),
    };
    crate::egress::store::approve_hosts(
        sec,
        &v.client_id,
        &hash,
        &hosts,
        &v.id,
        &super::operator(),
    )?;
    println!(
        "allowed for client {}'s command through the egress proxy: {}",
        v.client_id,
        hosts.join(", ")
    );
    Ok(())
}

pub fn commands(config: &Config, a: &CommandsArgs) -> Result<i32> {
    let sec = open(config, DbKind::Security)?;
    if let Some(h) = &a.history {
        let hash = registry::resolve_prefix(&sec, h)?;
        let hist = registry::history_of(&sec, &hash)?;
        if a.json {
            let v: Vec<_> = hist
                .iter()
                .map(|(t, o, n, r)| serde_json::json!({"changed_at": t, "old_policy": o, "new_policy": n, "reason": r}))
                .collect();
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            for (t, o, n, r) in hist {
                println!("{t}  {} → {n}  {r}", o.unwrap_or_else(|| "-".into()));
            }
        }
        return Ok(0);
    }
    let list = registry::list(&sec)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(0);
    }
    if list.is_empty() {
        println!("no commands yet");
    }
    println!(
        "{:<12} {:<12} {:<13} {:>5} {:>6} {:>5}  command",
        "hash", "policy", "override", "runs", "ok%", "risk"
    );
    for e in list {
        let rate = if e.execution_count > 0 {
            e.success_count as f64 * 100.0 / e.execution_count as f64
        } else {
            0.0
        };
        println!(
            "{:<12} {:<12} {:<13} {:>5} {:>5.0}% {:>5.2}  {}",
            &e.command_hash[..12.min(e.command_hash.len())],
            e.current_policy.as_str(),
            e.user_override.map(|o| o.as_str()).unwrap_or("-"),
            e.execution_count,
            rate,
            e.risk_score,
            e.command_text.replace('\n', " ")
        );
    }
    let promoted = crate::bash::evidence::promotions(&sec)?;
    if !promoted.is_empty() {
        println!(
            "\npromoted (learned from human approvals, per client, in the confinement approved):"
        );
        for p in promoted {
            println!(
                "{:<12} client {:<16} {:<8} set {:<12} {}",
                &p.command_hash[..12.min(p.command_hash.len())],
                p.client_id,
                p.mode.as_str(),
                p.permission_set,
                p.reason
            );
        }
    }
    Ok(0)
}

pub fn set_override(config: &Config, a: &OverrideArgs) -> Result<i32> {
    let ov = match a.value.as_str() {
        "clear" => None,
        v => Some(Override::parse(v).ok_or_else(|| {
            anyhow::anyhow!("override must be always_allow, always_ask, never or clear (got {v:?})")
        })?),
    };
    let mut sec = open(config, DbKind::Security)?;
    let as_hash = if a.hash.starts_with("sig:") {
        Err(anyhow::anyhow!(
            "{} is not a signature id (`sig:N` from `brainloop signatures`)",
            a.hash
        ))
    } else {
        registry::resolve_prefix(&sec, &a.hash)
    };
    let hash = match (as_hash, signatures::resolve(&sec, &a.hash)?) {
        (Ok(h), _) => h,
        (Err(_), Some(id)) => {
            let reason = a
                .reason
                .clone()
                .unwrap_or_else(|| format!("set by {}", super::operator()));
            let (sig, forgotten) = signatures::set_override(&mut sec, id, ov, &reason)?;
            println!(
                "signature {id} `{sig}`: override {}{}",
                ov.map(|o| o.as_str()).unwrap_or("cleared"),
                if ov.is_none() {
                    format!("; learning forgotten for {forgotten} client(s)")
                } else {
                    String::new()
                }
            );
            return Ok(0);
        }
        (Err(e), None) => return Err(e),
    };
    let reason = a
        .reason
        .clone()
        .unwrap_or_else(|| format!("set by {}", super::operator()));
    registry::set_override(&mut sec, &hash, ov, &reason, crate::time::now_ms())?;
    println!(
        "{hash}: override {}",
        ov.map(|o| o.as_str()).unwrap_or("cleared")
    );
    Ok(0)
}

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// A validation id, or a job id.
    pub id: String,
}

#[derive(clap::Args, Debug)]
pub struct UndoArgs {
    /// The job whose applied change set to undo.
    pub job: i64,
}

#[derive(clap::Args, Debug)]
pub struct SignaturesArgs {
    #[arg(long)]
    pub json: bool,
}

/// `brainloop show ID`: a validation (or job) with its change set's diff and the command's output.
pub fn show(config: &Config, a: &ShowArgs) -> Result<i32> {
    let out = db::open_read_only(&config.data_dir, DbKind::Output)?;
    let (job_id, v) = match validations::get(&out, &a.id)? {
        Some(v) => (v.job_id, Some(v)),
        None => match a.id.parse::<i64>() {
            Ok(j) => (j, validations::latest_of_job(&out, j)?),
            Err(_) => bail!("no validation {} (see `brainloop validations`)", a.id),
        },
    };
    println!("job {job_id}");
    if let Some(v) = &v {
        println!(
            "validation {} [{}]  policy {}  risk {:.2}",
            v.id,
            v.status,
            v.policy.as_deref().unwrap_or("?"),
            v.risk_score.unwrap_or(0.0)
        );
        println!("command: {}", v.command.as_deref().unwrap_or(""));
    }
    if let Ok(sec) = open(config, DbKind::Security) {
        print_egress(&sec, job_id, v.as_ref().map(|v| v.id.as_str()))?;
    }
    match changes::load_manifest(&config.data_dir, job_id)? {
        Some(m) => {
            println!(
                "ran on an overlay of {} (exit {}, {} ms): {}",
                m.workspace.display(),
                m.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "?".into()),
                m.duration_ms,
                m.change_set.summary()
            );
            if !m.signatures.is_empty() {
                println!("signatures: {}", m.signatures.join(" | "));
            }
            println!("--- stdout\n{}", m.stdout);
            println!("--- stderr\n{}", m.stderr);
            println!("--- changes");
            print!("{}", m.change_set.diff());
        }
        None => {
            let sec = open(config, DbKind::Security)?;
            let j: Option<(String, String, i64, Option<i64>)> = rusqlite::OptionalExtension::optional(sec.query_row(
                "SELECT summary, policy_used, applied_at, undone_at FROM journal WHERE job_id = ?1",
                [job_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            ))?;
            match j {
                Some((summary, p, at, undone)) => println!(
                    "change set applied ({p}) at {at}: {summary}{}",
                    undone
                        .map(|u| format!("; undone at {u}"))
                        .unwrap_or_default()
                ),
                None => println!(
                    "no pending change set (the command is asked up front, or was decided)"
                ),
            }
        }
    }
    Ok(0)
}

/// What the job's runs reached or wanted through the egress proxy, and what it asks for.
fn print_egress(sec: &rusqlite::Connection, job_id: i64, validation: Option<&str>) -> Result<()> {
    if let Some(r) = validation
        .map(|v| crate::egress::store::request(sec, v))
        .transpose()?
        .flatten()
    {
        println!("wants hosts: {}", r.hosts.join(", "));
    }
    let conns = crate::egress::store::of_job(sec, job_id)?;
    if conns.is_empty() {
        return Ok(());
    }
    println!("--- network (egress proxy)");
    for c in conns {
        println!("{}", connection_line(&c));
    }
    Ok(())
}

fn connection_line(c: &crate::egress::proxy::Connection) -> String {
    let mut line = format!("{:<8} {}:{} ({})", c.outcome, c.host, c.port, c.protocol);
    if let Some(a) = &c.address {
        line.push_str(&format!(" → {a}"));
    }
    if let Some(r) = &c.rule {
        line.push_str(&format!(" rule {r}"));
    }
    if c.outcome == "allowed" {
        line.push_str(&format!(" ↑{} B ↓{} B", c.bytes_up, c.bytes_down));
    }
    if let Some(r) = &c.reason {
        line.push_str(&format!(": {r}"));
    }
    line
}

/// `brainloop undo JOB`: restores what an applied change set replaced.
pub fn undo(config: &Config, a: &UndoArgs) -> Result<i32> {
    let restored = undo_job(config, a.job)?;
    println!("undid job {}: {} path(s) restored", a.job, restored.len());
    for p in restored {
        println!("  {p}");
    }
    Ok(0)
}

/// Undoes a job's applied change set (`undo` and `review`); the paths restored.
pub(crate) fn undo_job(config: &Config, job: i64) -> Result<Vec<String>> {
    let mut sec = open(config, DbKind::Security)?;
    let Some((ws, entries, undone)) = journal::for_undo(&sec, job)? else {
        bail!("job {job} has no applied change set (see `brainloop show {job}`)");
    };
    if let Some(t) = undone {
        bail!("job {job}'s change set was already undone (at {t})");
    }
    let j = changes::Journal {
        job_id: job,
        workspace: ws.into(),
        entries: serde_json::from_str(&entries)?,
    };
    let restored = changes::undo(&config.data_dir, &j)?;
    journal::mark_undone(&mut sec, job, crate::time::now_ms())?;
    Ok(restored)
}

/// `brainloop signatures`: learned and learning operation signatures.
pub fn signatures_list(config: &Config, a: &SignaturesArgs) -> Result<i32> {
    let sec = open(config, DbKind::Security)?;
    let rows = signatures::list(&sec, config.signature_approvals)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    if rows.is_empty() {
        println!("no signatures yet");
    }
    println!(
        "{:>4} {:>4} {:>4} {:>5} {:>5}  {:<28} signature",
        "id", "ok", "deny", "up", "auto", "state"
    );
    for r in rows {
        println!(
            "{:>4} {:>4} {:>4} {:>5} {:>5}  {:<28} {}",
            r.id, r.approvals, r.denials, r.upfront_approvals, r.auto_applied, r.state, r.signature
        );
        for c in &r.clients {
            println!("{:>9}{}", "", client_learning(c));
        }
    }
    Ok(0)
}

/// One line of who learned a signature, when and from which job (or how far it got).
fn client_learning(c: &signatures::ClientLearning) -> String {
    let when = |t: i64| {
        chrono::DateTime::from_timestamp_millis(t)
            .map(|d| d.format("%Y-%m-%d %H:%M:%S UTC").to_string())
            .unwrap_or_else(|| t.to_string())
    };
    let state = match (c.learned, c.learned_at) {
        (true, Some(t)) => format!(
            "learned with --learn by {} at {} from job {}",
            c.learned_by.as_deref().unwrap_or("?"),
            when(t),
            c.learned_job
                .map(|j| j.to_string())
                .unwrap_or_else(|| "?".into())
        ),
        (true, None) => format!(
            "learned ({} approvals, last at {})",
            c.approvals,
            when(c.updated_at)
        ),
        (false, _) if c.denials > 0 => "not learned: denied before".to_string(),
        (false, _) => "learning".to_string(),
    };
    format!(
        "client {}: {state}; {} approved, {} denied",
        c.client_id, c.approvals, c.denials
    )
}
