//! Shell command classification (issue 4; DESIGN §5 steps 1–5 and 9): decides, without
//! running anything, what a shell command would do.
//!
//! Stages, one file each:
//! - `validate` — length (≤ 4096 chars), NUL, UTF-8, empty.
//! - `parse` — tree-sitter-bash; any ERROR/MISSING node or a too-deep tree is a refusal.
//! - `walk` / `dispatch` — every simple command with its DAG layer, through substitutions,
//!   subshells, loops, heredocs, functions defined in the command, and wrappers / nested
//!   scripts (`env`, `timeout`, `xargs`, `find -exec`, `sh -c`, `eval`, `env -S`...);
//!   `words` evaluates words statically (quotes, escapes, `$IFS`, braces, known variables);
//!   `rawop` holds the result.
//! - `knowledge` (the classification of `crate::programs`' entries), `opts`, `judge`, `forms`, `scripts`,
//!   `git` and `npm` (forms the table cannot tell apart) — programs and flags → effects, GTFOBins flag rules, sed/awk/jq program analysis.
//! - `danger` (AST rules) with `paths` and `regexes` (second line) — blocking findings.
//! - `risk`, `permset` (+ confidence), `dag` (layers), `report` ([`CheckReport`], text),
//!   `cli` (`brainloop check`).
//!
//! Entry points: [`check`], [`render_text`], [`cli::run_check`]. Nothing here executes
//! the command.

pub mod arith;
pub mod builtins;
pub mod cli;
pub mod dag;
pub mod danger;
pub mod dispatch;
pub mod forms;
pub mod git;
pub mod judge;
pub mod knowledge;
pub mod npm;
pub mod opts;
pub mod parse;
pub mod paths;
pub mod permset;
pub mod rawop;
pub mod regexes;
pub mod report;
pub mod risk;
pub mod scripts;
pub mod types;
pub mod validate;
pub mod walk;
pub mod words;

use std::path::PathBuf;

use sha2::{Digest, Sha256};

pub use report::{render_text, CheckReport};
pub use types::{Category, Operation};

use crate::permset::PermissionSet;
use knowledge::Effects;
use types::display_word;

/// Version of the classifier; a change re-evaluates stored policies (DESIGN §5.8).
pub const CLASSIFIER_VERSION: &str = "brainloop-classify/1.1.0";

/// What the classifier needs besides the text.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// Canonical working directory: part of the command's identity hash.
    pub workdir: Option<PathBuf>,
}

/// Identity of a command (DESIGN §5.8): SHA-256 of the command text, a NUL separator (a
/// command cannot contain NUL), and the canonical workdir (empty when none).
pub fn command_hash(command: &str, workdir: Option<&std::path::Path>) -> String {
    let mut h = Sha256::new();
    h.update(command.as_bytes());
    h.update([0u8]);
    if let Some(w) = workdir {
        h.update(w.to_string_lossy().as_bytes());
    }
    hex::encode(h.finalize())
}

/// Classify one command. Never executes anything.
pub fn check(command: &str, ctx: &Context) -> CheckReport {
    let hash = command_hash(command, ctx.workdir.as_deref());
    let workdir = ctx
        .workdir
        .as_ref()
        .map(|p| p.to_string_lossy().into_owned());
    if let Err(e) = validate::validate(command) {
        return refused(command, hash, workdir, e);
    }
    let tree = match parse::parse_tree(command) {
        Ok(t) => t,
        Err(e) => return refused(command, hash, workdir, e),
    };
    let walked = parse::walk(&tree, command);
    if let Some(e) = walked.syntax_errors.first() {
        return refused(command, hash, workdir, e.clone());
    }
    if walked.truncated {
        // something was left unexamined: refusing is the only safe verdict
        return refused(
            command,
            hash,
            workdir,
            "too complex to analyse (operation or nesting bound reached)".into(),
        );
    }
    let raw_ops = &walked.ops;
    let findings = danger::findings(raw_ops, &walked, command);
    let blocked = !findings.is_empty();

    let mut all = Effects::default();
    for o in raw_ops {
        all.union(o.effects);
    }
    let op_risks: Vec<f64> = raw_ops.iter().map(risk::op_risk).collect();
    let mut operations: Vec<Operation> = raw_ops
        .iter()
        .zip(op_risks.iter())
        .map(|(o, r)| Operation {
            op: o.op.clone(),
            program: display_word(&o.program),
            program_path: o.program_dir.clone(),
            args: o.args.iter().map(|a| display_word(a)).collect(),
            kind: o.kind,
            category: o.effects.primary(),
            categories: o.effects.categories(),
            pure: o.effects.is_pure(),
            layer: o.layer,
            via: o.via.clone(),
            notes: o.notes.clone(),
            reads: o.reads.iter().map(|a| display_word(a)).collect(),
            writes: o.writes.iter().map(|a| display_word(a)).collect(),
            dynamic: o.dynamic(),
            risk: (r * 100.0).round() / 100.0,
            dir: o.dir.as_deref().map(display_word),
        })
        .collect();
    let layers = dag::layers(&mut operations);
    let executed_path = dag::executed_path(&operations);

    let pure = !blocked && operations.iter().all(|o| o.pure) && !walked.truncated;
    let risk_score = risk::command_risk(raw_ops, &op_risks, &all, blocked);
    let set = permset::infer(&all);
    let confidence = permset::confidence(raw_ops, &all, walked.truncated);

    let mut patterns: Vec<String> = Vec::new();
    for f in &findings {
        let p = format!("danger:{}", f.id);
        if !patterns.contains(&p) {
            patterns.push(p);
        }
    }
    for o in &operations {
        if !o.pure {
            for c in &o.categories {
                let p = format!("{}:{}", c.as_str(), o.program);
                if !patterns.contains(&p) {
                    patterns.push(p);
                }
            }
        }
    }
    let computed_program = raw_ops.iter().any(|o| o.program.contains(types::DYN));
    if computed_program {
        patterns.push("computed-program-name".into());
    }
    if raw_ops.iter().any(|o| o.stdin_exec) {
        patterns.push("code-from-stdin".into());
    }
    for (lang, _) in &walked.codes {
        let p = format!("inline-code:{lang}");
        if !patterns.contains(&p) {
            patterns.push(p);
        }
    }
    let runs_workspace_file = raw_ops.iter().any(|o| o.runs_file);

    let mut reasons: Vec<String> = findings.iter().map(|f| f.reason.clone()).collect();
    if !blocked && !pure {
        for l in layers.iter().filter(|l| l.requires_validation) {
            reasons.push(format!("layer {}: {}", l.index, l.reason));
        }
    }
    for e in &walked.inner_errors {
        reasons.push(e.clone());
    }
    let starting_policy = if blocked {
        "blocked"
    } else if pure {
        "auto_approve"
    } else if risk_score >= risk::WARNING_THRESHOLD {
        "ask_warning"
    } else {
        "ask"
    };
    CheckReport {
        classifier_version: CLASSIFIER_VERSION,
        command: command.to_string(),
        command_hash: hash,
        workdir,
        valid: true,
        error: None,
        blocked,
        reasons,
        risk_score,
        category: all.primary(),
        categories: all.categories(),
        permission_set: set,
        confidence,
        detected_patterns: patterns,
        pure,
        requires_validation: !pure,
        starting_policy,
        sandbox_auto_approvable: !blocked
            && set.profile().unasked_when_confined
            && risk_score < risk::WARNING_THRESHOLD,
        computed_program,
        runs_workspace_file,
        operations,
        layers,
        executed_path,
    }
}

fn refused(command: &str, hash: String, workdir: Option<String>, error: String) -> CheckReport {
    CheckReport {
        classifier_version: CLASSIFIER_VERSION,
        command: command.chars().take(validate::MAX_CHARS).collect(),
        command_hash: hash,
        workdir,
        valid: false,
        reasons: vec![format!("refused: {error}")],
        error: Some(error),
        blocked: false,
        risk_score: 1.0,
        category: Category::Unknown,
        categories: vec![Category::Unknown],
        permission_set: PermissionSet::McpStandard,
        confidence: 0.0,
        detected_patterns: vec!["invalid".into()],
        pure: false,
        requires_validation: true,
        starting_policy: "refused",
        sandbox_auto_approvable: false,
        computed_program: false,
        runs_workspace_file: false,
        operations: Vec::new(),
        layers: Vec::new(),
        executed_path: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> CheckReport {
        check(s, &Context::default())
    }

    #[test]
    fn issue_example() {
        let r = c(
            "cat data.csv | grep x | sort | uniq -c > out.txt && curl -s https://api.example.com",
        );
        assert!(r.valid && !r.blocked && !r.pure);
        let get = |op: &str| {
            r.operations
                .iter()
                .find(|o| o.op == op)
                .map(|o| (o.category, o.layer))
        };
        assert_eq!(get("bash:cat"), Some((Category::Readonly, 0)));
        assert_eq!(get("bash:grep"), Some((Category::Pure, 0)));
        assert_eq!(get("bash:sort"), Some((Category::Pure, 0)));
        assert_eq!(get("bash:uniq"), Some((Category::Pure, 0)));
        assert_eq!(get("redirect:write"), Some((Category::Filesystem, 0)));
        assert_eq!(get("bash:curl"), Some((Category::Network, 1)));
        assert_eq!(r.permission_set, "mcp-standard");
        assert_eq!(r.layers.len(), 2);
    }

    /// Issue 35: an option may take an effect away (`cargo --offline` reaches no registry);
    /// without it the same subcommand reaches the network.
    #[test]
    fn cargo_offline_reaches_no_registry() {
        let net = |s: &str| {
            c(s).operations
                .iter()
                .any(|o| o.categories.contains(&Category::Network))
        };
        assert!(net("cargo add serde"));
        assert!(net("cargo update"));
        assert!(!net("cargo add --offline --path ../strutil"));
        assert!(!net("cargo update --offline"));
        assert!(!net("cargo --frozen fetch"));
        assert!(!net("cargo package --list --allow-dirty --offline"));
        // another program's option of the same name takes nothing away
        assert!(net("curl --offline https://example.com"));
    }

    #[test]
    fn pure_command_runs_unasked() {
        let r = c("printf 'b\\na\\n' | sort | uniq -c");
        assert!(r.valid && r.pure && !r.blocked && !r.requires_validation);
        assert_eq!(r.permission_set, "minimal");
        assert_eq!(r.confidence, 0.95);
        assert_eq!(r.starting_policy, "auto_approve");
        assert_eq!(r.risk_score, 0.0);
        assert!(r.layers.iter().all(|l| !l.requires_validation));
        assert_eq!(
            r.executed_path,
            vec!["bash:printf", "bash:sort", "bash:uniq"]
        );
    }

    #[test]
    fn layers_name_what_needs_validation() {
        let r = c("echo a | sort; ls -l; echo done");
        let need: Vec<usize> = r
            .layers
            .iter()
            .filter(|l| l.requires_validation)
            .map(|l| l.index)
            .collect();
        assert_eq!(need, vec![1]);
        assert!(r.layers[1].reason.contains("bash:ls"));
        assert_eq!(r.permission_set, "readonly");
        assert!(r.sandbox_auto_approvable);
    }

    #[test]
    fn flags_for_the_policy_engine() {
        assert!(c("$X -l").computed_program);
        assert!(c("python3 x.py").runs_workspace_file);
        assert!(!c("ls").computed_program);
        let r = c("rm -rf build");
        assert_eq!(r.starting_policy, "ask");
        let r = c("rm -rf /etc/nginx");
        assert_eq!(r.starting_policy, "ask_warning");
        assert!(r.risk_score >= risk::WARNING_THRESHOLD);
    }

    #[test]
    fn text_rendering_explains() {
        let t = render_text(&c("rm -rf /"));
        assert!(t.contains("BLOCKED") && t.contains("recursive deletion"));
        let t = render_text(&c("echo ("));
        assert!(t.contains("REFUSED") && t.contains("syntax error"));
        let t = render_text(&c("cat a | grep x"));
        assert!(t.contains("layer 0") && t.contains("bash:grep"));
    }

    #[test]
    fn hash_includes_workdir() {
        let a = check(
            "ls",
            &Context {
                workdir: Some("/a".into()),
            },
        );
        let b = check(
            "ls",
            &Context {
                workdir: Some("/b".into()),
            },
        );
        assert_ne!(a.command_hash, b.command_hash);
        assert_eq!(a.command_hash.len(), 64);
    }
}
