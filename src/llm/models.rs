//! What each model family accepts (issue 51): the reasoning parameters (`reasoning_effort`,
//! `reasoning_format`) with their per-model defaults, whether `response_format: json_schema` and
//! `strict` tool schemas are accepted. A configured value a model refuses is corrected here,
//! once, with a warning — never sent to fail a job with a 400.
//!
//! The table follows Cerebras's shared inference as of 2026-10: `gpt-oss-*` (efforts
//! low/medium/high, default medium, reasoning in the `reasoning` field, strict tools and
//! json_schema), `qwen-*` (efforts none/low/medium/high, reasoning `raw` in `<think>` by
//! default, no strict tools), `zai-glm-*` (efforts none/low/medium/high), `llama*`/`gemma*`
//! (no reasoning parameters). An unknown model gets only what the operator configured.

/// What one model family accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub family: &'static str,
    /// `reasoning_effort` values accepted (empty: the parameter is never sent).
    pub efforts: &'static [&'static str],
    /// Sent when `[llm] reasoning_effort` is unset (None: not sent).
    pub default_effort: Option<&'static str>,
    /// `reasoning_format` values accepted (empty: never sent).
    pub formats: &'static [&'static str],
    /// Sent when `[llm] reasoning_format` is unset.
    pub default_format: Option<&'static str>,
    /// `response_format: {type: json_schema, strict: true}` (constrained decoding).
    pub json_schema: bool,
    /// `strict: true` in tool definitions.
    pub strict_tools: bool,
    /// A model not in the table: the operator's values are sent as they are.
    pub known: bool,
}

const ALL_FORMATS: &[&str] = &["parsed", "raw", "hidden", "none"];

const TABLE: &[(&str, Caps)] = &[
    (
        "gpt-oss",
        Caps {
            family: "gpt-oss",
            efforts: &["low", "medium", "high"],
            default_effort: Some("medium"),
            formats: &["parsed", "hidden"],
            default_format: Some("parsed"),
            json_schema: true,
            strict_tools: true,
            known: true,
        },
    ),
    (
        "qwen",
        Caps {
            family: "qwen",
            efforts: &["none", "low", "medium", "high"],
            default_effort: None,
            formats: ALL_FORMATS,
            default_format: Some("parsed"),
            json_schema: true,
            strict_tools: false,
            known: true,
        },
    ),
    (
        "zai-glm",
        Caps {
            family: "zai-glm",
            efforts: &["none", "low", "medium", "high"],
            default_effort: None,
            formats: ALL_FORMATS,
            default_format: Some("parsed"),
            json_schema: true,
            strict_tools: true,
            known: true,
        },
    ),
    (
        "llama",
        Caps {
            family: "llama",
            efforts: &[],
            default_effort: None,
            formats: &[],
            default_format: None,
            json_schema: true,
            strict_tools: true,
            known: true,
        },
    ),
    (
        "gemma",
        Caps {
            family: "gemma",
            efforts: &[],
            default_effort: None,
            formats: &[],
            default_format: None,
            json_schema: true,
            strict_tools: true,
            known: true,
        },
    ),
];

const UNKNOWN: Caps = Caps {
    family: "unknown",
    efforts: &[],
    default_effort: None,
    formats: &[],
    default_format: None,
    json_schema: false,
    strict_tools: false,
    known: false,
};

/// The capabilities of `model` (by its family prefix).
pub fn caps(model: &str) -> Caps {
    let m = model.trim().to_ascii_lowercase();
    TABLE
        .iter()
        .find(|(prefix, _)| m.starts_with(prefix))
        .map(|(_, c)| *c)
        .unwrap_or(UNKNOWN)
}

/// The reasoning parameters actually sent, and the warnings of what was corrected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reasoning {
    pub effort: Option<String>,
    pub format: Option<String>,
    pub warnings: Vec<String>,
}

/// One parameter: the configured value if the model takes it, else its default (with a
/// warning); an unknown model gets the configured value as is.
fn pick(
    model: &str,
    key: &str,
    configured: Option<&str>,
    accepted: &[&str],
    default: Option<&'static str>,
    known: bool,
    warnings: &mut Vec<String>,
) -> Option<String> {
    let configured = configured.map(str::trim).filter(|s| !s.is_empty());
    match configured {
        None => default.map(str::to_string),
        Some(v) if !known => Some(v.to_string()),
        Some(v) if accepted.contains(&v) => Some(v.to_string()),
        Some(v) => {
            let instead = default.map_or_else(|| "not sent".to_string(), |d| format!("{d:?}"));
            warnings.push(format!(
                "[llm] {key} = {v:?} is not accepted by {model} (it takes {}); {instead} instead",
                if accepted.is_empty() {
                    "none".to_string()
                } else {
                    accepted.join(", ")
                }
            ));
            default.map(str::to_string)
        }
    }
}

/// What to send for `model` given the `[llm]` reasoning keys.
pub fn reasoning(model: &str, effort: Option<&str>, format: Option<&str>) -> Reasoning {
    let c = caps(model);
    let mut warnings = Vec::new();
    let effort = pick(
        model,
        "reasoning_effort",
        effort,
        c.efforts,
        c.default_effort,
        c.known,
        &mut warnings,
    );
    let format = pick(
        model,
        "reasoning_format",
        format,
        c.formats,
        c.default_format,
        c.known,
        &mut warnings,
    );
    Reasoning {
        effort,
        format,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt_oss_refuses_effort_none_and_gets_medium_with_a_warning() {
        let r = reasoning("gpt-oss-120b", Some("none"), None);
        assert_eq!(r.effort.as_deref(), Some("medium"));
        assert_eq!(r.format.as_deref(), Some("parsed"));
        assert_eq!(r.warnings.len(), 1);
        assert!(r.warnings[0].contains("reasoning_effort = \"none\""));
        let r = reasoning("gpt-oss-120b", Some("high"), Some("hidden"));
        assert_eq!(
            (r.effort.as_deref(), r.format.as_deref()),
            (Some("high"), Some("hidden"))
        );
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn qwen_takes_none_and_raw_and_has_no_strict_tools() {
        let r = reasoning("qwen-3.8-27b", Some("none"), Some("raw"));
        assert_eq!(
            (r.effort.as_deref(), r.format.as_deref()),
            (Some("none"), Some("raw"))
        );
        assert!(!caps("qwen-3.8-27b").strict_tools);
        assert!(caps("gpt-oss-120b").strict_tools);
    }

    #[test]
    fn unknown_models_get_only_what_is_configured() {
        let r = reasoning("my-local-model", None, None);
        assert_eq!(r, Reasoning::default());
        let r = reasoning("my-local-model", Some("xhigh"), None);
        assert_eq!(r.effort.as_deref(), Some("xhigh"));
        let r = reasoning("llama3.1-8b", Some("low"), None);
        assert_eq!(r.effort, None);
        assert_eq!(r.warnings.len(), 1);
    }
}
