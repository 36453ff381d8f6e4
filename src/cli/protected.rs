//! `brainloop protected [PATH...]`: what is never applied without a human (`bash::protected`,
//! the one decision): the rules in the order they apply, what the workspace repositories'
//! configs point at now, the data list; with paths, the rule each would match if a change set
//! touched it (judged by the same function the worker uses).

use crate::bash::changes::{Change, ChangeSet, Kind};
use crate::bash::protected::{self, Table};
use crate::config::Config;
use anyhow::Result;
use serde_json::json;

#[derive(clap::Args, Debug)]
pub struct ProtectedArgs {
    /// Workspace-relative paths to judge (as if a change set modified them).
    pub paths: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(config: &Config, a: &ProtectedArgs) -> Result<i32> {
    let lists = config.path_lists();
    let table = Table::shared(&lists)?;
    let cs = ChangeSet {
        changes: a
            .paths
            .iter()
            .map(|p| Change {
                path: p.trim_start_matches("./").trim_end_matches('/').to_string(),
                kind: Kind::Modified,
                before: Some("file".into()),
                after: Some("file".into()),
                diff: None,
                privilege_bits_removed: false,
                run_keys: None,
            })
            .collect(),
        hash: String::new(),
        diff_truncated: false,
    };
    let ws = &config.workspace;
    let facts = protected::gather(ws, &cs, Some(ws));
    let judged = protected::decide(&table, &cs, &facts, &[]);
    let data: Vec<String> = crate::permset::DATA
        .iter()
        .map(|d| d.to_string())
        .chain(lists.data.iter().cloned())
        .collect();
    if a.json {
        let v = json!({
            "workspace": ws.display().to_string(),
            "pointed": facts.pointed.iter().map(|p| json!({"path": p.path, "beneath": p.dir, "why": p.why})).collect::<Vec<_>>(),
            "unreadable": facts.unreadable,
            "rules": table.rules().iter().map(|(p, w)| json!({"pattern": p, "why": w})).collect::<Vec<_>>(),
            "dotfile_rule": protected::DOTFILE_RULE,
            "data": data,
            "paths": cs.changes.iter().map(|c| {
                let h = judged.hits.iter().find(|h| h.path == c.path);
                json!({"path": c.path, "protected": h.is_some(), "rule": h.map(|h| &h.rule), "why": h.map(|h| &h.why)})
            }).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    if !cs.changes.is_empty() {
        for c in &cs.changes {
            match judged.hits.iter().find(|h| h.path == c.path) {
                Some(h) => println!("{}: protected (rule {}: {})", c.path, h.rule, h.why),
                None => println!("{}: not protected", c.path),
            }
        }
        return Ok(0);
    }
    println!(
        "Never applied without a human (workspace {}), in this order:",
        ws.display()
    );
    println!("\n1. what the workspace repositories' configs point at:");
    for u in &facts.unreadable {
        println!("   everything: {u}");
    }
    if facts.pointed.is_empty() && facts.unreadable.is_empty() {
        println!("   (nothing now)");
    }
    for p in &facts.pointed {
        println!(
            "   {}{}  ({})",
            p.path,
            if p.dir { "/**" } else { "" },
            p.why
        );
    }
    println!(
        "\n2. git's own files: every path with a .git component, every directory shaped like a git dir;\n   except what `git add`/`rm`/`mv`/`commit` write as companions in the repository they run in"
    );
    println!("\n3. the table (the operator's protected_paths first):");
    for (p, w) in table.rules() {
        println!("   {p}  ({w})");
    }
    println!(
        "\n4. {}: every other dot-file and dot-directory, unless data:",
        protected::DOTFILE_RULE
    );
    println!("   {}", data.join(" "));
    Ok(0)
}
