//! The walker's output: one [`RawOp`] per operation with everything the danger rules, risk
//! and report need, and [`Walked`] for the whole command. Also which variable assignments
//! make a command non-pure.

use super::knowledge::{Effects, Parsed};
use super::types::{OpKind, DYN};

/// Variables whose assignment makes a command non-pure (DESIGN §5.2 plus the ones that make
/// programs run other programs).
pub fn sensitive_var(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "PATH",
        "BASH_ENV",
        "ENV",
        "IFS",
        "PROMPT_COMMAND",
        "PS4",
        "SHELLOPTS",
        "BASHOPTS",
        "CDPATH",
        "HOME",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYOPT",
        "RUBYLIB",
        "NODE_OPTIONS",
        "NODE_PATH",
        "GCONV_PATH",
        "PAGER",
        "EDITOR",
        "VISUAL",
        "LESSOPEN",
        "LESSCLOSE",
        "MANPAGER",
        "BROWSER",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "HISTFILE",
        "TMPDIR",
        "GLOBIGNORE",
    ];
    EXACT.contains(&name)
        || name.starts_with("LD_")
        || name.starts_with("GIT_")
        || name.starts_with("BASH_FUNC_")
}

/// One operation with everything later stages need (the public view is `Operation`).
#[derive(Debug, Clone)]
pub struct RawOp {
    pub op: String,
    pub program: String,
    pub program_dir: Option<String>,
    pub args: Vec<String>,
    pub kind: OpKind,
    pub effects: Effects,
    pub layer: usize,
    pub via: Vec<String>,
    pub notes: Vec<String>,
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    pub block: Option<String>,
    pub stdin_exec: bool,
    pub decoder: bool,
    pub network_source: bool,
    pub runs_file: bool,
    pub is_shell: bool,
    pub canonical: Option<String>,
    pub parsed: Parsed,
    pub cmd_id: usize,
    /// This operation runs inside a substitution in the words of command `cmd_id`.
    pub subst_of: Option<usize>,
    /// (pipeline id, stage index).
    pub pipeline: Option<(usize, usize)>,
    pub background: bool,
    /// Its arguments come partly from stdin (xargs).
    pub stdin_args: bool,
    /// Runs on another host (ssh CMD).
    pub remote: bool,
    /// Its stdin comes from a heredoc / herestring / static echo.
    pub fed_static: bool,
    /// A shell whose stdin is a static script that was walked.
    pub static_script: bool,
    /// Redirect operator (`>`, `>>`, `<` ...) for redirect operations.
    pub redirect_op: Option<String>,
    /// Working directory set by an earlier static `cd` in the same command.
    pub cwd: Option<String>,
    /// Where it runs (`Walker::dir`): relative to the command's working directory (`""`:
    /// there) or absolute; None when a `cd` before it is computed.
    pub dir: Option<String>,
}

impl RawOp {
    pub fn dynamic(&self) -> bool {
        self.program.contains(DYN) || self.args.iter().any(|a| a.contains(DYN)) || self.stdin_args
    }
}

/// The result of walking a command.
#[derive(Debug, Default)]
pub struct Walked {
    pub ops: Vec<RawOp>,
    /// Code strings handed to other languages (`python -c`), for the regex line.
    pub codes: Vec<(String, String)>,
    /// Shell text of every nested script (`sh -c`, `eval`...), for the regex line.
    pub scripts: Vec<String>,
    /// Fork bombs found (a function calling itself in a pipeline or in the background, an
    /// endless loop starting background jobs), as reasons.
    pub fork_bombs: Vec<String>,
    /// Nested scripts that failed to parse.
    pub inner_errors: Vec<String>,
    /// Places where the grammar accepted text that bash would reject or read differently.
    pub syntax_errors: Vec<String>,
    /// The walk hit its size or depth bound.
    pub truncated: bool,
}
