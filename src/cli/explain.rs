//! `brainloop signatures --explain [SIG]` (issue 35): a learned signature in words, its state and
//! provenance per client, the approved examples it was learned from (re-signed now: the load-time
//! check, `bash::explain::check`, runs first and its suspensions are recorded), and variants of an
//! example it matches and refuses, each with the rules' reason. What it shows comes from the
//! agent (commands, paths): every such text goes through `shown`. `--json` prints the same.

use super::security::SignaturesArgs;
use crate::bash::explain::{self, Explanation, Outcome};
use crate::bash::signatures;
use crate::config::Config;
use crate::db::{self, DbKind};
use crate::shown;
use anyhow::{bail, Result};

pub fn when(t: i64) -> String {
    chrono::DateTime::from_timestamp_millis(t)
        .map(|d| d.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| t.to_string())
}

/// The explanations `--explain [SIG]` asks for: one signature, the learned ones (learned,
/// retired or suspended for some client), or all with `--all`.
pub fn run(config: &Config, a: &SignaturesArgs, key: &str) -> Result<i32> {
    if !DbKind::Security.path(&config.data_dir).exists() {
        bail!("no command_security.db: run `brainloop init` first");
    }
    let mut sec = db::open(&config.data_dir, DbKind::Security)?;
    // The rules load: their examples are checked, and what no longer holds is suspended.
    let checked = explain::check(&mut sec, crate::time::now_ms())?;
    let rows = signatures::list(&sec, config.signature_approvals)?;
    let chosen: Vec<&signatures::Row> = if key.is_empty() {
        rows.iter()
            .filter(|r| {
                a.all
                    || r.clients
                        .iter()
                        .any(|c| c.learned || c.retired || c.suspended.is_some())
            })
            .collect()
    } else {
        let Some(id) = signatures::resolve(&sec, key)? else {
            bail!(
                "no signature {} (see `brainloop signatures`)",
                shown::line(key)
            );
        };
        match rows.iter().find(|r| r.id == id) {
            Some(r) => vec![r],
            None => bail!("no signature {id} (see `brainloop signatures`)"),
        }
    };
    let table = crate::bash::protected::Table::shared(&config.path_lists())?;
    let out: Vec<Explanation> = chosen
        .iter()
        .map(|r| explain::explain(&sec, r, &table))
        .collect::<Result<_>>()?;
    if a.json {
        println!("{}", shown::json(&out)?);
        return Ok(0);
    }
    if out.is_empty() {
        println!(
            "no {}signatures yet{}",
            if a.all { "" } else { "learned " },
            if a.all {
                ""
            } else {
                " (--all: every signature)"
            }
        );
    }
    let suspended = checked.iter().filter(|c| c.suspended.is_some()).count();
    if suspended > 0 {
        println!("{suspended} learned signature(s) suspended: an approved example no longer signs as it (see below)\n");
    }
    for e in &out {
        print!("{}", render(e));
    }
    Ok(0)
}

/// One explanation as text (every agent-written part through `shown`).
pub fn render(e: &Explanation) -> String {
    let l = shown::line;
    let mut s = String::new();
    s.push_str(&format!("sig:{}  {}\n", e.id, l(&e.signature)));
    s.push_str(&format!("  matches: {}\n", l(&e.matches)));
    s.push_str(&format!("  state:   {}\n", l(&e.state)));
    if let (false, Some(w)) = (e.learnable, &e.why_not) {
        s.push_str(&format!("  never learned: {}\n", l(w)));
    }
    for c in &e.clients {
        s.push_str(&format!(
            "    client {}: {}\n",
            l(&c.client_id),
            l(&provenance(e.id, c))
        ));
    }
    s.push_str("  whatever it matches, a learned signature never applies a protected path or a path the command does not name (bash::effects)\n");
    if e.examples.is_empty() {
        s.push_str("  approved examples: none kept (learned before examples were kept, or by an operator override): not checked\n");
    } else {
        s.push_str("  approved examples (re-signed with the current classifier):\n");
    }
    for x in &e.examples {
        let ex = &x.example;
        s.push_str(&format!(
            "    job {} validation {} client {}, approved by {} at {}{}: {}\n",
            ex.job_id,
            l(ex.validation_id.as_deref().unwrap_or("?")),
            l(&ex.client_id),
            l(&ex.decided_by),
            when(ex.decided_at),
            if ex.learn { " with --learn" } else { "" },
            l(&ex.command)
        ));
        match &x.mismatch {
            None => s.push_str(&format!("      still signs as `{}`\n", l(&ex.signature))),
            Some(m) => s.push_str(&format!("      SUSPENDS IT: {}\n", l(m))),
        }
        if !ex.paths.is_empty() {
            let p: Vec<String> = ex.paths.iter().map(|(p, k)| format!("{p} ({k})")).collect();
            s.push_str(&format!("      changed: {}\n", l(&p.join(", "))));
        }
    }
    if let Some(first) = e.examples.first().filter(|_| !e.variants.is_empty()) {
        s.push_str(&format!(
            "  generated from job {}'s example, one change at a time, decided by the classifier and the apply rules:\n",
            first.example.job_id
        ));
        for v in &e.variants {
            let mark = match v.outcome {
                Outcome::Matches => "MATCHES ",
                Outcome::Refused => "REFUSED ",
                Outcome::NotNeeded => "NO NEED ",
            };
            s.push_str(&format!("    {mark} {}: {}\n", l(&v.change), l(&v.command)));
            s.push_str(&format!("             {}\n", l(&v.reason)));
        }
    }
    s.push('\n');
    s
}

/// One client's learning of a signature: learned, retired, suspended, or how far it got.
pub fn provenance(id: i64, c: &signatures::ClientLearning) -> String {
    let taught = match (c.learned_at, &c.learned_by) {
        (Some(t), by) => format!(
            "learned with --learn by {} at {} from job {}",
            by.as_deref().unwrap_or("?"),
            when(t),
            c.learned_job
                .map(|j| j.to_string())
                .unwrap_or_else(|| "?".into())
        ),
        (None, _) => format!("learned from {} approvals", c.approvals),
    };
    let denial = || {
        format!(
            "a human ({}) denied validation {} (job {}) at {}",
            c.denied_by.as_deref().unwrap_or("?"),
            c.denied_validation.as_deref().unwrap_or("?"),
            c.denied_job
                .map(|j| j.to_string())
                .unwrap_or_else(|| "?".into()),
            c.denied_at.map(when).unwrap_or_else(|| "?".into())
        )
    };
    let state = if c.retired {
        format!(
            "RETIRED: {taught}, then {}; its commands ask again (`brainloop override sig:{id} clear` forgets the denial, then `approve --learn` teaches it again)",
            denial()
        )
    } else if c.denials > 0 {
        format!("not learned: {} before it was learned", denial())
    } else if let Some(why) = &c.suspended {
        format!("SUSPENDED ({taught}): {why}; its commands ask again until the example signs the same or `approve --learn` teaches it again")
    } else if c.learned {
        taught
    } else {
        "learning".to_string()
    };
    format!("{state}; {} approved, {} denied", c.approvals, c.denials)
}
