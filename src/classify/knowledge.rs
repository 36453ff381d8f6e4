//! The knowledge base: the classification of every program and wrapper of the program table
//! (`crate::programs`, `src/programs/*.toml`), indexed by name once, and the effect set type. Option parsing is in `opts.rs`,
//! judging one argv against the table in `judge.rs`, the special forms (shells,
//! interpreters, wrappers, `find`, `xargs`, `env`, `command`) in `forms.rs`.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::types::Category;

pub use super::judge::{analyze, is_shell_name, Analysis, Nested};
pub use super::opts::{opt_matches, parse_opts, Opt, Parsed};

pub use crate::programs::{FlagRule, ProgramSpec, WrapperSpec};

/// Directories programs are resolved from (DESIGN §5.2: a fixed PATH, never the workspace).
pub const TRUSTED_DIRS: &[&str] = &[
    "/bin",
    "/usr/bin",
    "/sbin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
];

/// A set of effects (bitset over the non-pure categories; empty = pure).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Effects(u8);

impl Effects {
    const READ: u8 = 1;
    const WRITE: u8 = 2;
    const NET: u8 = 4;
    const PROC: u8 = 8;
    const ENV: u8 = 16;
    const UNKNOWN: u8 = 32;

    fn bit(c: Category) -> u8 {
        match c {
            Category::Pure => 0,
            Category::Readonly => Self::READ,
            Category::Filesystem => Self::WRITE,
            Category::Network => Self::NET,
            Category::Process => Self::PROC,
            Category::Env => Self::ENV,
            Category::Unknown => Self::UNKNOWN,
        }
    }
    pub fn add(&mut self, c: Category) {
        self.0 |= Self::bit(c);
    }
    pub fn remove(&mut self, c: Category) {
        self.0 &= !Self::bit(c);
    }
    pub fn has(&self, c: Category) -> bool {
        let b = Self::bit(c);
        if b == 0 {
            self.0 == 0
        } else {
            self.0 & b != 0
        }
    }
    pub fn is_pure(&self) -> bool {
        self.0 == 0
    }
    pub fn union(&mut self, o: Effects) {
        self.0 |= o.0;
    }
    pub fn from_names(names: &[String]) -> Effects {
        let mut e = Effects::default();
        for n in names {
            e.add(Category::parse(n).unwrap_or(Category::Unknown));
        }
        e
    }
    /// Every category present (just `Pure` when empty).
    pub fn categories(&self) -> Vec<Category> {
        let all = [
            Category::Readonly,
            Category::Filesystem,
            Category::Network,
            Category::Process,
            Category::Env,
            Category::Unknown,
        ];
        let v: Vec<Category> = all.into_iter().filter(|c| self.has(*c)).collect();
        if v.is_empty() {
            vec![Category::Pure]
        } else {
            v
        }
    }
    /// The single most privileged category, for display.
    pub fn primary(&self) -> Category {
        self.categories()
            .into_iter()
            .fold(Category::Pure, |a, b| a.escalate(b))
    }
}

/// The loaded table, with aliases resolved.
pub struct Knowledge {
    programs: HashMap<String, (String, ProgramSpec)>,
    wrappers: HashMap<String, (String, WrapperSpec)>,
    /// Set when the table failed to load: everything is then `unknown` (fail closed).
    pub load_error: Option<String>,
}

impl ProgramSpec {
    /// Whether some form of the program may run another program or code nobody can read
    /// statically (`process` / `unknown` in its effects, a flag's, a subcommand's, or a shell or
    /// interpreter): what `bash::run_on_use` must have an entry for.
    pub fn may_run_code(&self) -> bool {
        let mut names: Vec<&String> = self.effects.iter().chain(&self.sub_default).collect();
        for f in &self.flags {
            names.extend(f.add.iter().chain(f.set.iter().flatten()));
        }
        names.extend(self.subcommands.values().flat_map(|s| &s.effects));
        self.shell
            || self.interpreter
            || self.effects.is_empty()
            || names
                .iter()
                .any(|n| matches!(n.as_str(), "process" | "unknown"))
    }
}

impl Knowledge {
    /// Every program name the table knows (aliases included), with its entry's name and spec.
    pub fn programs(&self) -> impl Iterator<Item = (&str, &str, &ProgramSpec)> {
        self.programs
            .iter()
            .map(|(n, (entry, spec))| (n.as_str(), entry.as_str(), spec))
    }

    pub fn program(&self, name: &str) -> Option<&(String, ProgramSpec)> {
        self.programs.get(name)
    }
    pub fn wrapper(&self, name: &str) -> Option<&(String, WrapperSpec)> {
        self.wrappers.get(name)
    }
    pub fn len(&self) -> usize {
        self.programs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.programs.is_empty()
    }
}

/// Indexes a program table's classifications by name and alias.
pub fn load(t: &crate::programs::Table) -> Knowledge {
    let mut programs = HashMap::new();
    for e in &t.programs {
        let Some(spec) = &e.spec else { continue };
        for n in e.names() {
            programs.insert(n.to_string(), (e.name.clone(), spec.clone()));
        }
    }
    let mut wrappers = HashMap::new();
    for w in &t.wrappers {
        let name = &w.spec.name;
        for a in std::iter::once(name).chain(&w.spec.aliases) {
            wrappers.insert(a.clone(), (name.clone(), w.spec.clone()));
        }
    }
    Knowledge {
        programs,
        wrappers,
        load_error: None,
    }
}

/// The table in use (indexed once; a table that failed to load classifies everything as
/// `unknown`: fail closed).
pub fn knowledge() -> &'static Knowledge {
    static K: OnceLock<Knowledge> = OnceLock::new();
    K.get_or_init(|| match crate::programs::table() {
        Ok(t) => load(t),
        Err(e) => Knowledge {
            programs: HashMap::new(),
            wrappers: HashMap::new(),
            load_error: Some(format!("{e:#}")),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn table_loads() {
        assert!(
            knowledge().load_error.is_none(),
            "{:?}",
            knowledge().load_error
        );
        assert!(knowledge().len() > 200);
    }

    #[test]
    fn getopt_like() {
        let p = parse_opts(
            &v(&["-n5", "-rf", "--lines=3", "x"]),
            &v(&["-n", "--lines"]),
            &[],
            &[],
            false,
        );
        assert_eq!(p.operands, v(&["x"]));
        assert_eq!(p.values("-n"), vec!["5"]);
        assert!(p.has("-r") && p.has("-f"));
        let p = parse_opts(
            &v(&["--compress-prog=sh"]),
            &v(&["--compress-program"]),
            &[],
            &[],
            false,
        );
        assert!(p.has("--compress-program"));
    }

    #[test]
    fn judge() {
        assert!(analyze("grep", None, &v(&["x"])).effects.is_pure());
        assert!(analyze("grep", None, &v(&["x", "f"]))
            .effects
            .has(Category::Readonly));
        assert!(analyze("sort", None, &v(&["-o", "f"]))
            .effects
            .has(Category::Filesystem));
        assert!(analyze("sort", None, &v(&["--compress-program=sh"]))
            .effects
            .has(Category::Process));
        assert!(analyze("cat", Some("./bin"), &v(&[]))
            .effects
            .has(Category::Unknown));
        assert!(analyze("cat", Some("/bin"), &v(&[])).effects.is_pure());
    }
}
