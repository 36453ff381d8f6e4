//! Core value types shared by the classifier stages: operation categories, the
//! operations found in a command, and the markers used inside evaluated words.

use serde::{Deserialize, Serialize};

/// Marks a part of a word whose value is not known statically (`$x`, `$(...)`, globs of
/// unknown files are *not* dynamic: they stay literal).
pub const DYN: char = '\u{FFFC}';
/// Marks "some file found there" (`find /x -name y -exec rm {}`): never empty.
pub const ANY_FILE: char = '\u{FFFD}';
/// In a `find` placeholder, what follows is the one `-name` pattern every file found matches
/// (`ROOT/<FOUND>PATTERN`): `find . -name __pycache__ -exec rm -rf {} +` deletes only what lies
/// beneath `.` and is named by the pattern (issue 35; `bash::effects` holds the change set to it).
pub const FOUND: char = '\u{FFF9}';

/// A `find -name` pattern brainloop can hold a change set to: printable ASCII without shell or
/// bracket syntax (`[A-Za-z0-9._*?+@%,=~:-]`, shown as it is in signatures and prompts), with
/// at least one character that is not a wildcard (`*`, `?*` name everything).
pub fn plain_name_pattern(p: &str) -> bool {
    p.chars().any(|c| !matches!(c, '*' | '?'))
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._*?+@%,=~:-".contains(c))
}
/// Marks an unquoted `$IFS` expansion: the word is split there.
pub const SPLIT: char = '\u{1F}';

/// What an operation may touch. Ordered from least to most privileged only for display.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    /// No I/O beyond arguments, stdin and stdout.
    Pure,
    /// Reads files or directories (or file metadata).
    Readonly,
    /// Creates, modifies or deletes files.
    Filesystem,
    /// Talks to the network.
    Network,
    /// Runs other programs, controls processes or the system.
    Process,
    /// Reads or changes the environment / shell state that later commands inherit.
    Env,
    /// Not known to the table, or its effect cannot be decided statically.
    Unknown,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Pure => "pure",
            Category::Readonly => "readonly",
            Category::Filesystem => "filesystem",
            Category::Network => "network",
            Category::Process => "process",
            Category::Env => "env",
            Category::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<Category> {
        Some(match s {
            "pure" => Category::Pure,
            "readonly" => Category::Readonly,
            "filesystem" => Category::Filesystem,
            "network" => Category::Network,
            "process" => Category::Process,
            "env" => Category::Env,
            "unknown" => Category::Unknown,
            _ => return None,
        })
    }

    /// The stronger of two categories for one operation (a flag can only escalate).
    pub fn escalate(self, other: Category) -> Category {
        fn rank(c: Category) -> u8 {
            match c {
                Category::Pure => 0,
                Category::Readonly => 1,
                Category::Filesystem => 2,
                Category::Env => 3,
                Category::Network => 4,
                Category::Process => 5,
                Category::Unknown => 6,
            }
        }
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// What kind of thing an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// A simple command (program + arguments).
    Command,
    /// A redirection to or from a file (`> f`, `>> f`, `< f`, `2> f`).
    Redirect,
    /// A shell variable assignment that matters (PATH, LD_*, IFS, ...).
    Assignment,
}

/// One thing the command would do, as found by the walker and judged by the table.
#[derive(Debug, Clone, Serialize)]
pub struct Operation {
    /// Stable name: `bash:cat`, `redirect:write`, `assign:PATH`, `bash:<dynamic>`.
    pub op: String,
    /// Program basename as it would be looked up (after unwrapping and unquoting).
    pub program: String,
    /// Directory the program was named with (`/bin` for `/bin/rm`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program_path: Option<String>,
    /// Arguments after unquoting; dynamic parts shown as `…`.
    pub args: Vec<String>,
    pub kind: OpKind,
    /// The most privileged category (for display); `categories` has all of them.
    pub category: Category,
    pub categories: Vec<Category>,
    pub pure: bool,
    /// DAG layer (pipeline stages share a layer; `&&`, `||`, `;` start the next).
    pub layer: usize,
    /// Wrappers this operation was found inside (`sh -c`, `xargs`, `find -exec`, `function f`, `$(...)`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub via: Vec<String>,
    /// Why it got its category (flags that escalated it, files it reads, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Files it reads / writes (as far as statically known).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// The program name or some argument is computed at run time.
    pub dynamic: bool,
    /// Per-operation risk contribution (0..1).
    pub risk: f64,
    /// Where it runs after the static `cd`s before it: relative to the command's working
    /// directory (`""`: there) or absolute; None when a `cd` before it is computed at run time.
    /// The command path resolves its operands from here (`bash::signatures::op_dir`).
    #[serde(skip_serializing_if = "at_workdir")]
    pub dir: Option<String>,
}

impl Operation {
    /// Whether it is a find (`find ROOT -name PATTERN -delete`: the find form's writes are the
    /// placeholders of what it finds).
    pub fn is_find(&self) -> bool {
        self.program == crate::programs::Form::Find.name()
    }
}

fn at_workdir(d: &Option<String>) -> bool {
    d.as_deref() == Some("")
}

/// Render an evaluated word for humans: dynamic parts become `…`.
pub fn display_word(w: &str) -> String {
    let mut out = String::with_capacity(w.len());
    for c in w.chars() {
        match c {
            DYN => out.push('…'),
            ANY_FILE => out.push('*'),
            FOUND => out.push_str("**/"),
            SPLIT => out.push(' '),
            c => out.push(c),
        }
    }
    out
}
