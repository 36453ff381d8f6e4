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
    let code_subscript = |a: &String| a.contains('[') && (a.contains("$(") || a.contains('`'));
    // printf evaluates only the name `-v` gives (its format and arguments are text: `%d` of
    // `a[$(cmd)]` is an invalid number, never run)
    let hidden = if base == "printf" {
        printf_var(args).is_some_and(code_subscript)
    } else {
        VAR_BUILTINS.contains(&base) && args.iter().any(code_subscript)
    };
    if hidden {
        return Some(format!(
            "{base} evaluates an array subscript holding shell code"
        ));
    }
    None
}

/// The variable `printf -v NAME` (or `-vNAME`) writes.
fn printf_var(args: &[String]) -> Option<&String> {
    for (i, a) in args.iter().enumerate() {
        if a == "--" || !a.starts_with('-') {
            return None;
        }
        if a == "-v" {
            return args.get(i + 1);
        }
        if a.starts_with("-v") {
            return Some(a);
        }
    }
    None
}

/// A variable-writing builtin naming a sensitive variable (`read PATH`, `unset PATH`).
pub fn sensitive_target(base: &str, args: &[String]) -> Option<String> {
    if base == "printf" {
        let name = printf_var(args)?;
        let name = name.strip_prefix("-v").unwrap_or(name);
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
