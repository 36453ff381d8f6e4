//! Static re-validation of tasks marked pure (seed 000, "Validation du Code Généré"): before a
//! pure task is trusted, its code must contain none of seed 000's forbidden patterns (plus
//! `mcp`, `globalThis`, `constructor`, `Reflect` and `Deno`/`process` in any spelling), and
//! re-parsing it must detect no I/O at all. A corrupted pure task is refused with an error.

use super::{detect, mcp_permissions::McpPermissions, parse, resolve::Bindings, Lang, Task};
use oxc_allocator::Allocator;

/// Seed 000's `FORBIDDEN_PATTERNS`, as (word, must be followed by `.`), plus brainloop's.
const FORBIDDEN: &[(&str, bool)] = &[
    ("fetch", false),
    ("Deno", true),
    ("process", true),
    ("eval", false),
    ("Function", false),
    ("setTimeout", false),
    ("setInterval", false),
    ("console", true),
    ("import", false),
    ("require", false),
    // brainloop additions: ways around the seed's list
    ("mcp", false),
    ("globalThis", false),
    ("constructor", false),
    ("Reflect", false),
    ("__proto__", false),
];

/// Why a pure task was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("pure task {task} refused: {reason}")]
pub struct RevalidationError {
    pub task: String,
    pub reason: String,
}

/// Checks one task's code; `Ok` when it is pure or not marked pure.
pub fn validate_pure_task(task: &Task, lang: Lang) -> Result<(), RevalidationError> {
    validate_with(task, lang, &mut Allocator::default())
}

/// [`validate_pure_task`] reusing `alloc` (reset first) for the re-parse.
pub fn validate_with(
    task: &Task,
    lang: Lang,
    alloc: &mut Allocator,
) -> Result<(), RevalidationError> {
    if !task.pure {
        return Ok(());
    }
    let refuse = |reason: String| RevalidationError {
        task: task.id.clone(),
        reason,
    };
    if task.code.trim().is_empty() {
        return Err(refuse("missing code".into()));
    }
    if let Some(p) = forbidden_pattern(&task.code) {
        return Err(refuse(format!("contains forbidden pattern {p}")));
    }
    alloc.reset();
    let program = parse::parse(alloc, &task.code, lang)
        .map_err(|e| refuse(format!("its code does not parse on its own: {e}")))?;
    // Any detection refuses the task, whatever the tool mapping says.
    static MAPPING: std::sync::OnceLock<McpPermissions> = std::sync::OnceLock::new();
    let mapping = MAPPING.get_or_init(McpPermissions::defaults);
    let b = Bindings::collect(&program);
    let found = detect::detect(&program, &b, mapping);
    if b.too_deep || found.too_deep {
        return Err(refuse("its code is nested too deeply to check".into()));
    }
    if let Some(d) = found.detections.first() {
        return Err(refuse(format!("its code reaches {}", d.pattern)));
    }
    Ok(())
}

/// Checks every task; the first refusal is the error.
pub fn validate_pure_tasks(tasks: &[Task], lang: Lang) -> Result<(), RevalidationError> {
    tasks.iter().try_for_each(|t| validate_pure_task(t, lang))
}

/// The first forbidden pattern in `code` (`\bword\b`, or `\bword\.` for namespaces).
pub fn forbidden_pattern(code: &str) -> Option<String> {
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$';
    for (word, dot) in FORBIDDEN {
        let mut from = 0;
        while let Some(pos) = code[from..].find(word) {
            let start = from + pos;
            let end = start + word.len();
            let before_ok = start == 0 || !ident(b[start - 1]);
            let after_ok = if *dot {
                // seed: /\bDeno\./ — also catch `Deno[...]` and `Deno ?.`
                let rest = code[end..].trim_start();
                rest.starts_with('.') || rest.starts_with('[') || rest.starts_with("?.")
            } else {
                end >= b.len() || !ident(b[end])
            };
            if before_ok && after_ok {
                return Some(if *dot {
                    format!("{word}.")
                } else {
                    (*word).to_string()
                });
            }
            from = end;
        }
    }
    None
}
