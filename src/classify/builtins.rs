//! Shell builtins that run shell code or rebind variables through a side door the word
//! walk does not see: `mapfile -C`, `compgen -C/-F`, `hash -p`, an array subscript holding
//! `$(...)` given to a builtin that evaluates it (`printf -v`, `read`, `test -v`, `declare`,
//! `unset`, `let`...), `${x@P}`, and variable-writing builtins naming a sensitive variable
//! (`printf -v PATH`, `read PATH`, `unset PATH`: bash then looks programs up in the working
//! directory). They are never pure and their hidden program counts as a computed name.

use super::rawop::sensitive_var;

/// Builtins that take variable names (or arithmetic) as operands.
const VAR_BUILTINS: &[&str] = &[
    "read",
    "mapfile",
    "readarray",
    "printf",
    "getopts",
    "wait",
    "unset",
    "let",
    "declare",
    "typeset",
    "local",
    "export",
    "readonly",
    "test",
    "[",
    "[[",
    "((",
    "eval",
];

fn short_flag(args: &[String], letters: &[char]) -> bool {
    args.iter().any(|a| {
        a.starts_with('-') && !a.starts_with("--") && a[1..].chars().any(|c| letters.contains(&c))
    })
}

/// A builtin that would run shell code hidden from the walk: the reason.
pub fn runs_hidden_code(base: &str, args: &[String]) -> Option<String> {
    match base {
        "mapfile" | "readarray" if short_flag(args, &['C']) => {
            return Some(format!("{base} -C runs its callback as shell code"))
        }
        "compgen" | "complete" if short_flag(args, &['C', 'F']) => {
            return Some(format!("{base} -C/-F runs a command or function"))
        }
        "hash" if short_flag(args, &['p']) => {
            return Some("hash -p rebinds a command name to any program".into())
        }
        _ => {}
    }
    if VAR_BUILTINS.contains(&base)
        && args
            .iter()
            .any(|a| a.contains('[') && (a.contains("$(") || a.contains('`')))
    {
        return Some(format!(
            "{base} evaluates an array subscript holding shell code"
        ));
    }
    None
}

/// A variable-writing builtin naming a sensitive variable (`read PATH`, `unset PATH`).
pub fn sensitive_target(base: &str, args: &[String]) -> Option<String> {
    if base == "printf" {
        let i = args.iter().position(|a| a == "-v")?;
        let name = args.get(i + 1)?;
        let id: String = name
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        return sensitive_var(&id).then_some(id);
    }
    if !VAR_BUILTINS.contains(&base) || matches!(base, "test" | "[" | "[[" | "eval") {
        return None;
    }
    args.iter()
        .flat_map(|a| a.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .find(|t| !t.is_empty() && sensitive_var(t))
        .map(String::from)
}

/// `${x@P}` expands a prompt string, which runs command substitutions in the value.
pub fn prompt_expansion(text: &str) -> bool {
    text.contains("@P}")
}
