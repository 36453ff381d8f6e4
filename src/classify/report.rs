//! The `check --json` object (DESIGN §7) and its readable rendering for `brainloop check`.

use serde::Serialize;

use super::dag::Layer;
use super::types::{display_word, Category, Operation};
use crate::permset::PermissionSet;

/// Everything the classifier decided about one command. Field names are a contract
/// (DESIGN §7): add fields freely, never rename.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub classifier_version: &'static str,
    pub command: String,
    /// SHA-256 (hex) of the command text, a NUL byte, and the canonical workdir (DESIGN §5.8).
    pub command_hash: String,
    pub workdir: Option<String>,
    /// False when the text fails validation or does not parse: a clear refusal.
    pub valid: bool,
    /// Validation or parse error when `valid` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A dangerous pattern was found: nothing lifts this.
    pub blocked: bool,
    /// Why it is blocked / refused / needs validation (empty when it can run unasked).
    pub reasons: Vec<String>,
    pub risk_score: f64,
    /// The most privileged category over all operations (`pure` when all are pure).
    pub category: Category,
    /// Every category the operations have.
    pub categories: Vec<Category>,
    /// The narrowest set covering every operation (never `trusted`).
    pub permission_set: PermissionSet,
    pub confidence: f64,
    pub detected_patterns: Vec<String>,
    /// Every operation is pure (and the command is valid and not blocked).
    pub pure: bool,
    /// False only when the command may run with no human at all (valid, not blocked, pure).
    pub requires_validation: bool,
    /// Starting policy (DESIGN §5.7): auto_approve | ask | ask_warning; `blocked` / `refused`.
    pub starting_policy: &'static str,
    /// Readonly, below the warning threshold: auto-approvable when an enforcing sandbox confines it.
    pub sandbox_auto_approvable: bool,
    /// A program name is computed at run time (never promoted).
    pub computed_program: bool,
    /// Runs a file as code (interpreter with a script, `source`, `./x`).
    pub runs_workspace_file: bool,
    pub operations: Vec<Operation>,
    pub layers: Vec<Layer>,
    pub executed_path: Vec<String>,
}

impl CheckReport {
    /// `invalid` (refused), `block` (a dangerous pattern) or `ok`: what a corpus case and an
    /// entry's example call the verdict.
    pub fn verdict(&self) -> &'static str {
        if !self.valid {
            "invalid"
        } else if self.blocked {
            "block"
        } else {
            "ok"
        }
    }
}

/// A readable explanation of a report.
pub fn render_text(r: &CheckReport) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "command:  {}\n",
        r.command.replace('\n', "\n          ")
    ));
    let verdict = if !r.valid {
        "REFUSED — the command is not valid shell".to_string()
    } else if r.blocked {
        "BLOCKED — a dangerous pattern was found; nothing lifts this".to_string()
    } else if r.pure {
        "PURE — runs without validation".to_string()
    } else {
        let mut v = format!("NEEDS VALIDATION — policy {}", r.starting_policy);
        if r.sandbox_auto_approvable {
            v.push_str(" (auto-approvable when an enforcing sandbox confines it)");
        }
        v
    };
    s.push_str(&format!("verdict:  {verdict}\n"));
    if let Some(e) = &r.error {
        s.push_str(&format!("error:    {e}\n"));
    }
    s.push_str(&format!(
        "set:      {} (confidence {:.2})   risk: {:.2}   category: {}\n",
        r.permission_set,
        r.confidence,
        r.risk_score,
        r.categories
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join("+")
    ));
    if !r.reasons.is_empty() {
        s.push_str("reasons:\n");
        for x in &r.reasons {
            s.push_str(&format!("  - {x}\n"));
        }
    }
    for l in &r.layers {
        s.push_str(&format!("layer {}: {}\n", l.index, l.reason));
        for o in r.operations.iter().filter(|o| o.layer == l.index) {
            let args: Vec<String> = o.args.iter().map(|a| display_word(a)).collect();
            let mut line = format!("    {:<22} {:<10}", o.op, o.category.as_str());
            if !args.is_empty() {
                let a = args.join(" ");
                let a: String = a.chars().take(60).collect();
                line.push_str(&format!(" {a}"));
            }
            if !o.via.is_empty() {
                line.push_str(&format!("   [via {}]", o.via.join(" → ")));
            }
            s.push_str(line.trim_end());
            s.push('\n');
            for n in &o.notes {
                s.push_str(&format!("        · {n}\n"));
            }
        }
    }
    if !r.detected_patterns.is_empty() {
        s.push_str(&format!("patterns: {}\n", r.detected_patterns.join(", ")));
    }
    s.push_str(&format!("hash:     {}\n", r.command_hash));
    s.push_str(&format!("classifier {}\n", r.classifier_version));
    s
}
