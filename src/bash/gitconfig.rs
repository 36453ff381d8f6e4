//! git's configuration files as git reads them, for `bash::protected`: [`parse`] reads one file's
//! entries (sections, subsections, quoting, escapes, comments, continuation lines, the legacy
//! `[section.sub]` form) and [`pointer`] says which of them name a path git reads or a program
//! git runs (`core.hooksPath`, `include.path`, `includeIf.*.path`, `core.attributesFile`,
//! `core.fsmonitor`, filters, aliases, ...). Pure: the files are read beneath the workspace by
//! `bash::protected`. A line git would refuse ("bad config line") is skipped here: git itself
//! then refuses to run with that file, so nothing it names runs.

/// One `key = value` of a config file (section and key lower-cased, as git compares them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub section: String,
    pub subsection: Option<String>,
    pub key: String,
    /// None: the key alone on its line (a boolean true).
    pub value: Option<String>,
}

impl Entry {
    /// `section.subsection.key`, as `git config --list` shows it.
    pub fn name(&self) -> String {
        match &self.subsection {
            Some(s) => format!("{}.{s}.{}", self.section, self.key),
            None => format!("{}.{}", self.section, self.key),
        }
    }
}

/// The entries of one config file, in order.
pub fn parse(text: &str) -> Vec<Entry> {
    let b: Vec<char> = text.trim_start_matches('\u{feff}').chars().collect();
    let n = b.len();
    let mut i = 0;
    let mut out = Vec::new();
    let mut section = String::new();
    let mut sub: Option<String> = None;
    let skip_line = |i: &mut usize| {
        while *i < n && b[*i] != '\n' {
            *i += 1;
        }
    };
    while i < n {
        let c = b[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' || c == ';' {
            skip_line(&mut i);
        } else if c == '[' {
            i += 1;
            match header(&b, &mut i) {
                Some((s, ss)) => {
                    section = s;
                    sub = ss;
                }
                None => {
                    section.clear();
                    sub = None;
                    skip_line(&mut i);
                }
            }
        } else if c.is_ascii_alphabetic() && !section.is_empty() {
            let mut key = String::new();
            while i < n && (b[i].is_ascii_alphanumeric() || b[i] == '-') {
                key.push(b[i].to_ascii_lowercase());
                i += 1;
            }
            while i < n && (b[i] == ' ' || b[i] == '\t') {
                i += 1;
            }
            let value = if i < n && b[i] == '=' {
                i += 1;
                match value(&b, &mut i) {
                    Some(v) => Some(v),
                    None => {
                        skip_line(&mut i);
                        continue;
                    }
                }
            } else if i >= n || matches!(b[i], '\n' | '\r' | '#' | ';') {
                None
            } else {
                skip_line(&mut i);
                continue;
            };
            out.push(Entry {
                section: section.clone(),
                subsection: sub.clone(),
                key,
                value,
            });
        } else {
            skip_line(&mut i);
        }
    }
    out
}

/// `[name]`, `[name "sub"]` or the legacy `[name.sub]`, from just after the `[`.
fn header(b: &[char], i: &mut usize) -> Option<(String, Option<String>)> {
    let mut name = String::new();
    while *i < b.len() && (b[*i].is_ascii_alphanumeric() || b[*i] == '-' || b[*i] == '.') {
        name.push(b[*i].to_ascii_lowercase());
        *i += 1;
    }
    if *i < b.len() && b[*i] == ']' {
        *i += 1;
        return match name.split_once('.') {
            Some((s, rest)) if !s.is_empty() => Some((s.to_string(), Some(rest.to_string()))),
            _ if name.is_empty() => None,
            _ => Some((name, None)),
        };
    }
    while *i < b.len() && (b[*i] == ' ' || b[*i] == '\t') {
        *i += 1;
    }
    if *i >= b.len() || b[*i] != '"' || name.is_empty() || name.contains('.') {
        return None;
    }
    *i += 1;
    let mut sub = String::new();
    loop {
        let c = *b.get(*i)?;
        *i += 1;
        match c {
            '"' => break,
            '\n' => return None,
            '\\' => {
                let e = *b.get(*i)?;
                if e == '\n' {
                    return None;
                }
                sub.push(e);
                *i += 1;
            }
            c => sub.push(c),
        }
    }
    (b.get(*i) == Some(&']')).then(|| {
        *i += 1;
        (name, Some(sub))
    })
}

/// A value, from just after the `=`: quotes, escapes, comments and continuation lines as git
/// reads them; None where git reports a bad config line.
fn value(b: &[char], i: &mut usize) -> Option<String> {
    let mut v = String::new();
    let mut quoted = false;
    let mut spaces = String::new();
    let mut started = false;
    while *i < b.len() {
        let c = b[*i];
        *i += 1;
        match c {
            '\n' => {
                if quoted {
                    return None;
                }
                return Some(v);
            }
            ' ' | '\t' | '\r' if !quoted => {
                if started {
                    spaces.push(c);
                }
            }
            '#' | ';' if !quoted => {
                while *i < b.len() && b[*i] != '\n' {
                    *i += 1;
                }
                return Some(v);
            }
            '"' => {
                v.push_str(&std::mem::take(&mut spaces));
                started = true;
                quoted = !quoted;
            }
            '\\' => {
                let e = *b.get(*i)?;
                *i += 1;
                let r = match e {
                    '\n' => continue,
                    't' => '\t',
                    'n' => '\n',
                    'b' => '\u{8}',
                    '\\' | '"' => e,
                    _ => return None,
                };
                v.push_str(&std::mem::take(&mut spaces));
                started = true;
                v.push(r);
            }
            c => {
                v.push_str(&std::mem::take(&mut spaces));
                started = true;
                v.push(c);
            }
        }
    }
    (!quoted).then_some(v)
}

/// What a config entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pointer {
    /// Another config file git reads (`include.path`, `includeIf.*.path`), relative to the
    /// including file's directory.
    Include,
    /// A directory of hooks git runs (`core.hooksPath`), relative to the worktree's top.
    Hooks,
    /// A directory git copies into new repositories, hooks included (`init.templateDir`).
    Templates,
    /// A file git reads that selects programs or paths (`core.attributesFile`,
    /// `core.excludesFile`), relative to the worktree's top.
    File,
    /// A command git runs through the shell: every word with a `/` names a program or script
    /// (relative to the worktree's top, where git runs it).
    Command,
}

impl Pointer {
    pub fn what(self) -> &'static str {
        match self {
            Pointer::Include => "git reads it as configuration",
            Pointer::Hooks => "git runs the hooks there",
            Pointer::Templates => "git copies it, hooks included, into new repositories",
            Pointer::File => "git reads it (attributes select filter and diff drivers)",
            Pointer::Command => "git runs it",
        }
    }
}

/// Keys naming a command, by (section, any subsection?, key): `*` any key of the section.
const COMMANDS: &[(&str, bool, &str)] = &[
    ("core", false, "fsmonitor"),
    ("core", false, "sshcommand"),
    ("core", false, "editor"),
    ("core", false, "pager"),
    ("core", false, "askpass"),
    ("core", false, "gitproxy"),
    ("sequence", false, "editor"),
    ("diff", false, "external"),
    ("diff", true, "command"),
    ("diff", true, "textconv"),
    ("filter", true, "clean"),
    ("filter", true, "smudge"),
    ("filter", true, "process"),
    ("merge", true, "driver"),
    ("gpg", false, "program"),
    ("gpg", true, "program"),
    ("credential", false, "helper"),
    ("credential", true, "helper"),
    ("alias", false, "*"),
    ("pager", false, "*"),
    ("interactive", false, "difffilter"),
    ("submodule", true, "update"),
    ("difftool", true, "cmd"),
    ("difftool", true, "path"),
    ("mergetool", true, "cmd"),
    ("mergetool", true, "path"),
    ("man", true, "cmd"),
    ("man", true, "path"),
    ("browser", true, "cmd"),
    ("browser", true, "path"),
    ("sendemail", false, "smtpserver"),
    ("uploadpack", false, "packobjectshook"),
];

/// What `e` names, if it names a path git reads or a program git runs.
pub fn pointer(e: &Entry) -> Option<Pointer> {
    let (s, sub, k) = (e.section.as_str(), e.subsection.is_some(), e.key.as_str());
    Some(match (s, sub, k) {
        ("include", false, "path") | ("includeif", true, "path") => Pointer::Include,
        ("core", false, "hookspath") => Pointer::Hooks,
        ("init", false, "templatedir") => Pointer::Templates,
        ("core", false, "attributesfile") | ("core", false, "excludesfile") => Pointer::File,
        ("core", false, "fsmonitor") if is_bool(e.value.as_deref()) => return None,
        _ if COMMANDS
            .iter()
            .any(|(cs, csub, ck)| *cs == s && *csub == sub && (*ck == "*" || *ck == k)) =>
        {
            Pointer::Command
        }
        _ => return None,
    })
}

fn is_bool(v: Option<&str>) -> bool {
    match v {
        None => true,
        Some(v) => matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0"
        ),
    }
}

/// The words of a command value that name a file (contain a `/`), quotes removed; a leading
/// `!` (aliases, `submodule.*.update`) dropped.
pub fn command_paths(v: &str) -> Vec<String> {
    v.trim_start()
        .trim_start_matches('!')
        .split(|c: char| {
            c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '<' | '>' | '`')
        })
        .map(|w| w.trim_matches(|c| c == '"' || c == '\'').to_string())
        .map(|w| match w.split_once('=') {
            // `VAR=/path cmd`, `--opt=/path`
            Some((k, p)) if !k.contains('/') => p.to_string(),
            _ => w,
        })
        .filter(|w| w.contains('/') && !w.starts_with('-'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(s: &str, sub: Option<&str>, k: &str, v: Option<&str>) -> Entry {
        Entry {
            section: s.into(),
            subsection: sub.map(Into::into),
            key: k.into(),
            value: v.map(Into::into),
        }
    }

    #[test]
    fn reads_what_git_reads() {
        let cases: &[(&str, &[Entry])] = &[
            (
                "[core]\n\thooksPath = .husky\n",
                &[e("core", None, "hookspath", Some(".husky"))],
            ),
            (
                "[Core] HooksPath=\"a b\" # c\n",
                &[e("core", None, "hookspath", Some("a b"))],
            ),
            (
                "[core]\nfsmonitor = \"echo x\\\"y\" ; tail\n",
                &[e("core", None, "fsmonitor", Some("echo x\"y"))],
            ),
            (
                "[core]\n  pager = less \\\n  -R   \n",
                &[e("core", None, "pager", Some("less   -R"))],
            ),
            (
                "[includeIf \"gitdir:~/x/\"]\npath = ../shared.cfg\n",
                &[e(
                    "includeif",
                    Some("gitdir:~/x/"),
                    "path",
                    Some("../shared.cfg"),
                )],
            ),
            (
                "[filter.Lfs]\nsmudge = tools/smudge %f\n",
                &[e("filter", Some("lfs"), "smudge", Some("tools/smudge %f"))],
            ),
            (
                "[core] bare\n[core]hooksPath=h\n",
                &[
                    e("core", None, "bare", None),
                    e("core", None, "hookspath", Some("h")),
                ],
            ),
            // a bad line is skipped (git refuses the whole file)
            ("[core]\nx = \"open\n", &[]),
            ("hookspath = outside-a-section\n", &[]),
        ];
        for (text, want) in cases {
            assert_eq!(&parse(text), want, "{text:?}");
        }
    }

    /// The parser against the real git on the same file (skipped, visibly, without git).
    #[test]
    fn agrees_with_git_config_list_or_skips_without_git() {
        let text = "\u{feff}[core]\n\thooksPath = \" .hooks \"\n\tfsmonitor = \"sh\" tools/fsmon.sh ; x\n[include]\n\tpath = a\\\\b.cfg\n[alias]\n\tst = !tools/st.sh \\\n --x\n[includeIf \"gitdir/i:W\\\"x\"]\n\tpath = ../c.cfg\n[sub.Sect]\nk=v\n";
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("config");
        std::fs::write(&f, text).unwrap();
        let out = match std::process::Command::new("git")
            .args(["config", "--file"])
            .arg(&f)
            .args(["--no-includes", "--list", "-z"])
            .output()
        {
            Ok(o) if o.status.success() => o.stdout,
            _ => {
                eprintln!("SKIPPED: no usable git");
                return;
            }
        };
        let git: Vec<(String, String)> = String::from_utf8(out)
            .unwrap()
            .split('\0')
            .filter(|s| !s.is_empty())
            .map(|s| match s.split_once('\n') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (s.to_string(), String::new()),
            })
            .collect();
        let ours: Vec<(String, String)> = parse(text)
            .iter()
            .map(|e| (e.name(), e.value.clone().unwrap_or_default()))
            .collect();
        assert_eq!(ours, git);
    }

    #[test]
    fn pointers_and_commands() {
        let p = |s, sub, k, v| pointer(&e(s, sub, k, Some(v)));
        assert_eq!(p("core", None, "hookspath", ".husky"), Some(Pointer::Hooks));
        assert_eq!(p("include", None, "path", "x"), Some(Pointer::Include));
        assert_eq!(
            p("includeif", Some("gitdir:x"), "path", "x"),
            Some(Pointer::Include)
        );
        assert_eq!(p("core", None, "fsmonitor", "true"), None);
        assert_eq!(
            p("core", None, "fsmonitor", "x/y.sh"),
            Some(Pointer::Command)
        );
        assert_eq!(
            p("filter", Some("a"), "smudge", "x"),
            Some(Pointer::Command)
        );
        assert_eq!(p("alias", None, "st", "!x"), Some(Pointer::Command));
        assert_eq!(p("core", None, "attributesfile", "a"), Some(Pointer::File));
        assert_eq!(p("user", None, "name", "a"), None);
        assert_eq!(
            command_paths("!\"tools/a b\" --x=/opt/y sh ./s.sh; PAGER=bin/p less"),
            vec!["tools/a", "/opt/y", "./s.sh", "bin/p"]
        );
    }
}
