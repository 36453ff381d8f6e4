//! git's options and subcommand forms that write, execute or reach the network although their
//! subcommand reads (issue 19 item 2). the program entry (`src/programs/git.toml`) gives each subcommand its effects; this
//! refines them by position (a global `-p` pages, `git log -p` does not) and by operand
//! (`git branch` lists, `git branch X` creates), and records why in the notes `brainloop check`
//! shows. The configuration-driven programs (pager, fsmonitor, textconv, filters, gpg…) are
//! neutralised at run time instead, for the sets that run without a human
//! (`sandbox::neutral`).

use super::knowledge::Effects;
use super::types::Category;

/// Whether `program` is git: its entry says `refine = "git"` (git's name is that entry's data).
pub fn is_git(program: &str) -> bool {
    crate::programs::table().is_ok_and(|t| {
        t.spec(program)
            .is_some_and(|s| s.refine == Some(crate::programs::Refine::Git))
    })
}

/// git's global options that take a value (git's entry's `value_opts`: `-C`, `-c`,
/// `--git-dir`…); empty when the table failed to load.
pub fn global_value() -> &'static [String] {
    crate::programs::table()
        .ok()
        .and_then(|t| t.spec("git"))
        .map_or(&[], |s| s.value_opts.as_slice())
}

/// Whether `a` is one of git's global options that take a value.
pub fn is_global_value(a: &str) -> bool {
    global_value().iter().any(|o| o == a)
}

/// Whether `git -c KEY=…` with this key can only change identity, display or messages (git's
/// entry's `lists.safe_config_keys`: see the comment there; none when the table failed to load).
pub fn safe_config_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    let safe = crate::programs::table().map_or(&[][..], |t| t.list("git", "safe_config_keys"));
    safe.iter().any(|s| match s.strip_suffix('.') {
        Some(section) => k
            .strip_prefix(section)
            .is_some_and(|r| r.len() > 1 && r.starts_with('.')),
        None => k == *s,
    })
}

/// The keys of the global `-c KEY[=VALUE]` options (before the subcommand), in order, as typed.
pub fn config_keys(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if !a.starts_with('-') || a == "--" {
            break;
        }
        // `-c K=V`, and the attached `-cK=V` (git refuses it; judged as if it took it)
        let value = match a {
            "-c" => args.get(i + 1).map(String::as_str),
            _ if a.starts_with("-c") && !a.starts_with("--") => Some(&a[2..]),
            _ => None,
        };
        if let Some(v) = value {
            out.push(v.split_once('=').map_or(v, |(k, _)| k).to_string());
        }
        if is_global_value(a) {
            i += 1;
        }
        i += 1;
    }
    out
}

/// The first global `-c` key not on git's `safe_config_keys` (`--config-env` names no key here: it
/// is judged as a flag).
pub fn unsafe_config_key(args: &[String]) -> Option<String> {
    config_keys(args).into_iter().find(|k| !safe_config_key(k))
}

/// Whether `arg` is `opt`, `opt=VALUE` or (for a short option) `optVALUE`.
fn is_opt(arg: &str, opt: &str) -> bool {
    arg == opt
        || arg.strip_prefix(opt).is_some_and(|r| {
            r.starts_with('=') || (!opt.starts_with("--") && opt.len() == 2 && !r.is_empty())
        })
}

fn any(rest: &[String], opts: &[&str]) -> bool {
    rest.iter()
        .take_while(|a| *a != "--")
        .any(|a| opts.iter().any(|o| is_opt(a, o)))
}

/// Operands after the subcommand (words not starting with `-`, and not the value of a known
/// value option of that subcommand).
fn operands<'a>(rest: &'a [String], value_opts: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut skip = false;
    let mut after_dd = false;
    for a in rest {
        if skip {
            skip = false;
            continue;
        }
        if after_dd {
            out.push(a.as_str());
        } else if a == "--" {
            after_dd = true;
        } else if a.starts_with('-') && a.len() > 1 {
            skip = value_opts.contains(&a.as_str());
        } else {
            out.push(a.as_str());
        }
    }
    out
}

/// What the refinement found.
#[derive(Debug, Default, PartialEq)]
pub struct Refined {
    /// Effects to add to the subcommand's.
    pub add: Vec<Category>,
    /// Files written (`--output=F`).
    pub writes: Vec<String>,
    pub notes: Vec<String>,
}

impl Refined {
    fn with(&mut self, c: Category, note: &str) {
        if !self.add.contains(&c) {
            self.add.push(c);
        }
        self.notes.push(note.to_string());
    }
}

/// Refines git's effects from its arguments (everything after `git`).
/// Long because it is one table of git subcommands, an arm each, read top to bottom.
pub fn refine(args: &[String]) -> Refined {
    let mut r = Refined::default();
    // global options, up to the subcommand
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if !a.starts_with('-') || a == "--" {
            break;
        }
        if a == "-p" || a == "--paginate" {
            r.with(
                Category::Process,
                "git -p/--paginate runs a pager (a program named by configuration or PAGER)",
            );
        }
        if is_global_value(a) {
            i += 1;
        }
        i += 1;
    }
    if let Some(k) = unsafe_config_key(args) {
        r.with(
            Category::Process,
            &format!("git -c {k}: a configuration key that can make git run a program or read a file it names (core.pager, core.sshCommand, aliases… — GTFOBins); only identity, colour and display keys are safe (git's `safe_config_keys` in `src/programs/git.toml`)"),
        );
    }
    let Some(sub) = args.get(i).map(String::as_str) else {
        return r;
    };
    let rest = &args[i + 1..];
    if any(rest, &["--help"]) {
        r.with(
            Category::Process,
            "--help runs a manual viewer (man, a browser)",
        );
    }
    match sub {
        "help"
            if any(rest, &["-w", "--web", "-i", "--info", "-m", "--man"])
                || !operands(rest, &[]).is_empty() =>
        {
            r.with(
                Category::Process,
                "git help TOPIC runs a manual viewer (man, info, a browser)",
            );
        }
        "branch" => {
            let writes_opt = any(
                rest,
                &[
                    "-d",
                    "-D",
                    "--delete",
                    "-m",
                    "-M",
                    "--move",
                    "-c",
                    "-C",
                    "--copy",
                    "-f",
                    "--force",
                    "-u",
                    "--set-upstream-to",
                    "--unset-upstream",
                    "-t",
                    "--track",
                    "--create-reflog",
                ],
            );
            let list = any(rest, &["-l", "--list"]);
            let value = [
                "--contains",
                "--no-contains",
                "--merged",
                "--no-merged",
                "--points-at",
                "--sort",
                "--format",
                "--color",
                "--column",
                "--abbrev",
            ];
            if any(rest, &["--edit-description"]) {
                r.with(
                    Category::Process,
                    "git branch --edit-description runs an editor",
                );
            }
            if writes_opt || (!list && !operands(rest, &value).is_empty()) {
                r.with(
                    Category::Filesystem,
                    "git branch with a name (or -d/-m/-c/-f/-u) creates, moves or deletes a branch (writes .git)",
                );
            }
        }
        "tag" => {
            if any(rest, &["-v", "--verify"]) {
                r.with(Category::Process, "git tag -v runs gpg.program");
            }
            if any(rest, &["-s", "--sign", "-u", "--local-user"]) {
                r.with(Category::Process, "git tag -s/-u runs gpg.program");
            }
            let list = any(rest, &["-l", "--list", "-v", "--verify"]);
            let value = [
                "--contains",
                "--no-contains",
                "--merged",
                "--no-merged",
                "--points-at",
                "--sort",
                "--format",
                "--color",
                "--column",
                "-n",
            ];
            if any(
                rest,
                &[
                    "-d",
                    "--delete",
                    "-a",
                    "--annotate",
                    "-m",
                    "--message",
                    "-F",
                    "--file",
                    "-f",
                    "--force",
                    "-s",
                    "-u",
                ],
            ) || (!list && !operands(rest, &value).is_empty())
            {
                r.with(
                    Category::Filesystem,
                    "git tag with a name (or -d/-a/-m/-f) creates or deletes a tag (writes .git)",
                );
            }
        }
        "reflog" => {
            if matches!(
                operands(rest, &[]).first(),
                Some(&"expire") | Some(&"delete") | Some(&"drop")
            ) {
                r.with(
                    Category::Filesystem,
                    "git reflog expire/delete/drop rewrites the reflogs (writes .git)",
                );
            }
        }
        "remote" => match operands(rest, &[]).first().copied() {
            None | Some("get-url") => {}
            Some("show") if any(rest, &["-n"]) => {}
            Some("show") => r.with(
                Category::Network,
                "git remote show contacts the remote (without -n)",
            ),
            Some("update") | Some("prune") => {
                r.with(
                    Category::Network,
                    "git remote update/prune fetches from remotes",
                );
                r.with(Category::Filesystem, "and writes .git");
            }
            Some(_) => r.with(
                Category::Filesystem,
                "git remote add/remove/rename/set-* changes .git/config",
            ),
        },
        "grep" if any(rest, &["-O", "--open-files-in-pager"]) => {
            r.with(
                Category::Process,
                "git grep -O/--open-files-in-pager runs the program given (or the pager)",
            );
        }
        "archive" => {
            if any(rest, &["--remote"]) {
                r.with(Category::Network, "git archive --remote contacts a remote");
            }
            if any(rest, &["--exec"]) {
                r.with(Category::Process, "git archive --exec runs a program");
            }
        }
        _ => {}
    }
    if any(rest, &["--show-signature"]) {
        r.with(Category::Process, "--show-signature runs gpg.program");
    }
    // `--output=F` (diff, log, show, format-patch…, archive -o) writes F
    let mut k = 0;
    while k < rest.len() {
        let a = rest[k].as_str();
        if a == "--" {
            break;
        }
        let out_short = sub == "archive" && a == "-o";
        if a == "--output" || out_short {
            if let Some(f) = rest.get(k + 1) {
                r.writes.push(f.clone());
            }
            k += 1;
        } else if let Some(f) = a.strip_prefix("--output=") {
            r.writes.push(f.to_string());
        } else if sub == "archive" && a.starts_with("-o") && a.len() > 2 {
            r.writes.push(a[2..].to_string());
        }
        k += 1;
    }
    if !r.writes.is_empty() {
        r.with(Category::Filesystem, "--output=FILE writes FILE");
    }
    r
}

/// A form of git's local bookkeeping (issue 35) whose writes in its own dir are declared
/// (git's `local_companions` in `src/programs/git.toml`, keyed by `form`): only the plain spellings below, with the
/// names the command gives. Any other flag (force, track, sign, strategy, template, editor,
/// interactive, separate git dir…) is no such form: what git writes then stays protected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// `switch`, `switch -c`, `restore`, `branch`, `branch -d`, `tag`, `tag -d`, `stash`,
    /// `stash pop`, `stash drop`, `merge`, `init`, `clone` (of a local path).
    pub form: &'static str,
    /// The branch or tag names the command gives (`-` for `git switch -`); for `init` the
    /// initial branch (`-b`, else `-c init.defaultBranch`, else `master`).
    pub names: Vec<String>,
    /// `init`: the directory given (relative to the working directory; `.` when none);
    /// `clone`: the directory it makes.
    pub dir: Option<String>,
}

/// A branch or tag name as the forms accept it: what `git check-ref-format --branch` accepts,
/// narrowed to plain characters (no `..`, `@{`, leading `-` or `.`, `.lock`, empty component).
pub fn plain_ref_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 200
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | '+'))
        && !n.starts_with('-')
        && !n.contains("..")
        && !n.ends_with(".lock")
        && n.split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.') && !c.ends_with('.'))
}

/// Splits `rest` (after the subcommand) into flags and operands, accepting only the flags of
/// `plain` and the value flags of `valued` (value separate, attached with `=`, or attached to a
/// one-letter flag); None if any other flag is given. Returns (flags with values, operands).
#[allow(clippy::type_complexity)]
fn plain_args<'a>(
    rest: &'a [String],
    plain: &[&'a str],
    valued: &[&'a str],
) -> Option<(Vec<(&'a str, Option<&'a str>)>, Vec<&'a str>)> {
    let mut flags = Vec::new();
    let mut ops = Vec::new();
    let mut i = 0;
    let mut dd = false;
    while i < rest.len() {
        let a = rest[i].as_str();
        i += 1;
        if dd || !a.starts_with('-') || a == "-" {
            ops.push(a);
            continue;
        }
        if a == "--" {
            dd = true;
            continue;
        }
        if plain.contains(&a) {
            flags.push((a, None));
            continue;
        }
        if valued.contains(&a) {
            flags.push((a, Some(rest.get(i)?.as_str())));
            i += 1;
            continue;
        }
        let attached = valued.iter().find_map(|v| {
            let r = a.strip_prefix(v)?;
            if v.starts_with("--") {
                r.strip_prefix('=').map(|x| (*v, x))
            } else {
                (!r.is_empty()).then_some((*v, r))
            }
        });
        match attached {
            Some((v, x)) => flags.push((v, Some(x))),
            None => return None,
        }
    }
    Some((flags, ops))
}

/// The bookkeeping form of a git command (`args`: everything after `git`), if it is one.
/// Long because it is one table of subcommand spellings, an arm each.
pub fn local_form(args: &[String]) -> Option<Local> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if !a.starts_with('-') || a == "--" {
            break;
        }
        if is_global_value(a) {
            i += 1;
        }
        i += 1;
    }
    let sub = args.get(i)?.as_str();
    let rest = &args[i + 1..];
    let dd = rest.iter().any(|a| a == "--");
    let names = |ops: &[&str]| -> Option<Vec<String>> {
        ops.iter()
            .all(|n| plain_ref_name(n))
            .then(|| ops.iter().map(|n| n.to_string()).collect())
    };
    let local = |form: &'static str, names: Vec<String>| {
        Some(Local {
            form,
            names,
            dir: None,
        })
    };
    const Q: &[&str] = &["-q", "--quiet", "--progress", "--no-progress"];
    match sub {
        "switch" | "checkout" => {
            let create: &[&str] = if sub == "switch" {
                &["-c", "--create"]
            } else {
                &["-b"]
            };
            let (flags, ops) = plain_args(rest, Q, create)?;
            if let Some((_, Some(n))) = flags.iter().find(|(f, _)| create.contains(f)) {
                // `switch -c NAME [START]`: START read, not written
                return (ops.len() <= 1 && !dd && plain_ref_name(n)).then(|| Local {
                    form: "switch -c",
                    names: vec![n.to_string()],
                    dir: None,
                });
            }
            match (sub, dd, ops.as_slice()) {
                (_, false, [n]) if *n == "-" || plain_ref_name(n) => {
                    local("switch", vec![n.to_string()])
                }
                // `checkout -- PATHS` / `checkout PATH PATH…`: the named paths from the index
                ("checkout", _, [_, ..]) => local("restore", Vec::new()),
                _ => None,
            }
        }
        "restore" => {
            let (_, ops) = plain_args(
                rest,
                &[
                    "-q",
                    "--quiet",
                    "-S",
                    "--staged",
                    "-W",
                    "--worktree",
                    "--progress",
                    "--no-progress",
                ],
                &["-s", "--source"],
            )?;
            (!ops.is_empty()).then(|| Local {
                form: "restore",
                names: Vec::new(),
                dir: None,
            })
        }
        "branch" => {
            let (flags, ops) = plain_args(rest, &["-d", "-D", "--delete", "-q", "--quiet"], &[])?;
            if !flags
                .iter()
                .any(|(f, _)| matches!(*f, "-d" | "-D" | "--delete"))
            {
                // `branch NAME [START]`
                return match ops.as_slice() {
                    [n] | [n, _] if plain_ref_name(n) => local("branch", vec![n.to_string()]),
                    _ => None,
                };
            }
            (!ops.is_empty()).then_some(())?;
            local("branch -d", names(&ops)?)
        }
        "tag" => {
            let (flags, ops) = plain_args(
                rest,
                &["-a", "--annotate", "-d", "--delete"],
                &["-m", "--message"],
            )?;
            if flags.iter().any(|(f, _)| matches!(*f, "-d" | "--delete")) {
                return (!ops.is_empty())
                    .then_some(())
                    .and_then(|_| local("tag -d", names(&ops)?));
            }
            match ops.as_slice() {
                [n] | [n, _] if plain_ref_name(n) => local("tag", vec![n.to_string()]),
                _ => None,
            }
        }
        "stash" => {
            let (verb, rest) = match rest.first().map(String::as_str) {
                Some(v) if !v.starts_with('-') => (v, &rest[1..]),
                _ => ("push", rest),
            };
            match verb {
                "push" | "save" => {
                    plain_args(
                        rest,
                        &[
                            "-q",
                            "--quiet",
                            "-u",
                            "--include-untracked",
                            "-k",
                            "--keep-index",
                            "--no-keep-index",
                            "--staged",
                            "-S",
                        ],
                        &["-m", "--message"],
                    )?;
                    local("stash", Vec::new())
                }
                "pop" | "apply" => {
                    let (_, ops) = plain_args(rest, &["-q", "--quiet", "--index"], &[])?;
                    (ops.len() <= 1).then(|| Local {
                        form: "stash pop",
                        names: Vec::new(),
                        dir: None,
                    })
                }
                "drop" | "clear" => {
                    let (_, ops) = plain_args(rest, &["-q", "--quiet"], &[])?;
                    (ops.len() <= 1).then(|| Local {
                        form: "stash drop",
                        names: Vec::new(),
                        dir: None,
                    })
                }
                _ => None,
            }
        }
        "merge" => {
            let (_, ops) = plain_args(
                rest,
                &[
                    "-q",
                    "--quiet",
                    "--no-edit",
                    "--no-ff",
                    "--ff",
                    "--ff-only",
                    "--no-stat",
                    "-n",
                    "--stat",
                    "--no-verify",
                    "--no-progress",
                    "--progress",
                    "--no-log",
                ],
                &["-m", "--message"],
            )?;
            (!ops.is_empty() && !dd).then_some(())?;
            local("merge", names(&ops)?)
        }
        "init" => {
            let (flags, ops) = plain_args(rest, &["-q", "--quiet"], &["-b", "--initial-branch"])?;
            let branch = flags
                .iter()
                .find_map(|(_, v)| *v)
                .map(str::to_string)
                .or_else(|| {
                    // `-c init.defaultBranch=NAME` before the subcommand
                    let mut out = None;
                    let mut j = 0;
                    while j < i {
                        if args[j] == "-c" {
                            if let Some((k, v)) = args.get(j + 1).and_then(|kv| kv.split_once('='))
                            {
                                if k.eq_ignore_ascii_case("init.defaultbranch") {
                                    out = Some(v.to_string());
                                }
                            }
                            j += 1;
                        }
                        j += 1;
                    }
                    out
                })
                .unwrap_or_else(|| "master".to_string());
            match ops.as_slice() {
                [] | [_] if plain_ref_name(&branch) => Some(Local {
                    form: "init",
                    names: vec![branch],
                    dir: Some(ops.first().unwrap_or(&".").to_string()),
                }),
                _ => None,
            }
        }
        "clone" => {
            let c = local_clone(rest)?;
            Some(Local {
                form: "clone",
                names: c.branch.into_iter().collect(),
                dir: Some(c.dest),
            })
        }
        _ => None,
    }
}

/// A clone of a repository named by a plain local path (`args`: what follows `clone`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalClone {
    /// The source repository's path, as given.
    pub source: String,
    /// The directory the clone makes (given, or git's name for it: the source's last
    /// component without `.git`).
    pub dest: String,
    /// `-b BRANCH`.
    pub branch: Option<String>,
}

/// `git clone [-q] [-b BRANCH] SRC [DEST]` where SRC is a plain path: no `:` (git reads
/// `host:path` as ssh and `proto::…` as a transport), no `file://`, no option beyond quiet,
/// progress and the branch (`--upload-pack`, `--template`, `-c`, `--recurse-submodules`,
/// `--reference`, `--separate-git-dir`… keep the network's effects and ask up front). Git clones
/// such a path with its local transport: nothing leaves the machine.
pub fn local_clone(args: &[String]) -> Option<LocalClone> {
    let (flags, ops) = plain_args(
        args,
        &["-q", "--quiet", "--progress", "--no-progress"],
        &["-b", "--branch"],
    )?;
    let branch = flags.iter().find_map(|(_, v)| *v).map(str::to_string);
    if branch.as_deref().is_some_and(|b| !plain_ref_name(b)) {
        return None;
    }
    let plain = |p: &str| {
        !p.is_empty()
            && !p.starts_with('-')
            && !p.starts_with('~')
            && !p.contains(':')
            && !p.contains(super::types::DYN)
            && !p.chars().any(|c| c.is_control())
    };
    let (source, dest) = match ops.as_slice() {
        [s] => (*s, None),
        [s, d] => (*s, Some(*d)),
        _ => return None,
    };
    if !plain(source) || dest.is_some_and(|d| !plain(d)) {
        return None;
    }
    let dest = match dest {
        Some(d) => d.trim_end_matches('/').to_string(),
        None => {
            let s = source.trim_end_matches('/');
            let s = s.strip_suffix("/.git").unwrap_or(s);
            let s = s.strip_suffix(".git").unwrap_or(s);
            s.rsplit('/').next().unwrap_or(s).to_string()
        }
    };
    (!dest.is_empty() && dest != "." && dest != "..").then(|| LocalClone {
        source: source.to_string(),
        dest,
        branch,
    })
}

/// Applies [`refine`] to effects computed from the table.
pub fn apply(args: &[String], fx: &mut Effects, notes: &mut Vec<String>, writes: &mut Vec<String>) {
    if args.first().map(String::as_str) == Some("clone") && local_clone(&args[1..]).is_some() {
        fx.remove(Category::Network);
        notes.push("a clone of a local path: git's local transport, no network".into());
    }
    let r = refine(args);
    let own: Vec<&str> = fx
        .categories()
        .into_iter()
        .filter(|c| !matches!(c, Category::Readonly | Category::Pure))
        .map(Category::as_str)
        .collect();
    if !own.is_empty() {
        notes.push(format!(
            "not read-only: this git subcommand itself is {} (its program entry, src/programs/)",
            own.join(" + ")
        ));
    } else if r.add.is_empty() {
        notes.push(
            "read-only form: in the readonly set git runs with its configuration neutralised (no pager, fsmonitor, hooks, gpg, textconv, filters, external diff; see sandbox::neutral)".into(),
        );
    }
    for c in r.add {
        fx.add(c);
    }
    writes.extend(r.writes);
    notes.extend(r.notes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use Category::*;

    #[test]
    fn a_clone_is_local_only_of_a_plain_path_with_plain_flags() {
        let lc = |cmd: &str| {
            let args: Vec<String> = cmd.split_whitespace().map(String::from).collect();
            local_clone(&args).map(|c| (c.source, c.dest, c.branch))
        };
        let s = |x: &str| x.to_string();
        assert_eq!(
            lc("-q remotes/kv.git"),
            Some((s("remotes/kv.git"), s("kv"), None))
        );
        assert_eq!(
            lc("remotes/kv/.git/"),
            Some((s("remotes/kv/.git/"), s("kv"), None))
        );
        assert_eq!(
            lc("-b dev ../r mine/"),
            Some((s("../r"), s("mine"), Some(s("dev"))))
        );
        for no in [
            "git@host:r.git",
            "host:r",
            "file:///srv/r.git",
            "ext::sh",
            "https://x/y",
            "--upload-pack=x r d",
            "-u x r d",
            "--template=t r d",
            "-c core.hooksPath=h r d",
            "--config core.fsmonitor=x r d",
            "--recurse-submodules r",
            "--reference /srv r",
            "--separate-git-dir=g r d",
            "-b -x r",
            "-b ../x r",
            "r d extra",
            "~/r d",
            "r .",
            "..",
            "",
        ] {
            assert_eq!(lc(no), None, "{no}");
        }
    }

    #[test]
    fn forms_that_write_execute_or_reach_the_network() {
        // (command after `git`, effects added, files written)
        let cases: &[(&str, &[Category], &[&str])] = &[
            ("status", &[], &[]),
            ("log -p", &[], &[]),
            ("-p log", &[Process], &[]),
            ("--paginate status", &[Process], &[]),
            ("--no-pager log", &[], &[]),
            ("-C sub log", &[], &[]),
            // issue 35: `-c` keys off the safe table run code; identity and colour keys do not
            ("-c core.pager=cat log", &[Process], &[]),
            ("-c user.name=a -c core.sshCommand=x log", &[Process], &[]),
            ("-c User.Email=a@b -c color.ui=always log", &[], &[]),
            ("-c alias.x=!id x", &[Process], &[]),
            ("commit -c HEAD", &[], &[]),
            ("branch", &[], &[]),
            ("branch -a -v", &[], &[]),
            ("branch --list feat*", &[], &[]),
            ("branch --contains HEAD", &[], &[]),
            ("branch x", &[Filesystem], &[]),
            ("branch -d x", &[Filesystem], &[]),
            ("branch -m a b", &[Filesystem], &[]),
            ("branch --edit-description", &[Process], &[]),
            ("tag", &[], &[]),
            ("tag -l v*", &[], &[]),
            ("tag v1", &[Filesystem], &[]),
            ("tag -d v1", &[Filesystem], &[]),
            ("tag -v v1", &[Process], &[]),
            ("reflog", &[], &[]),
            ("reflog show", &[], &[]),
            ("reflog expire --expire=now --all", &[Filesystem], &[]),
            ("reflog delete HEAD@{1}", &[Filesystem], &[]),
            ("remote -v", &[], &[]),
            ("remote get-url origin", &[], &[]),
            ("remote show -n origin", &[], &[]),
            ("remote show origin", &[Network], &[]),
            ("remote add x http://h", &[Filesystem], &[]),
            ("diff --output=/tmp/x", &[Filesystem], &["/tmp/x"]),
            ("log --output out.txt", &[Filesystem], &["out.txt"]),
            ("grep -O foo", &[Process], &[]),
            ("grep -Ovim foo", &[Process], &[]),
            ("grep --open-files-in-pager=sh foo", &[Process], &[]),
            ("grep -n foo", &[], &[]),
            ("help", &[], &[]),
            ("help -a", &[], &[]),
            ("help -w log", &[Process], &[]),
            ("help log", &[Process], &[]),
            ("log --help", &[Process], &[]),
            ("log --show-signature", &[Process], &[]),
            ("archive --remote=x HEAD", &[Network], &[]),
            ("archive -o x.tar HEAD", &[Filesystem], &["x.tar"]),
        ];
        for (cmd, add, writes) in cases {
            let args: Vec<String> = cmd.split_whitespace().map(String::from).collect();
            let r = refine(&args);
            let mut got = r.add.clone();
            got.sort();
            let mut want = add.to_vec();
            want.sort();
            assert_eq!(got, want, "git {cmd}: {:?}", r.notes);
            assert_eq!(r.writes, writes.to_vec(), "git {cmd}");
            assert_eq!(
                r.notes.is_empty(),
                add.is_empty(),
                "git {cmd}: a note says why"
            );
        }
    }

    /// The bookkeeping forms (issue 35): (command after `git`, Some((form, names, dir)) / None).
    #[test]
    fn local_bookkeeping_forms_and_their_names() {
        type Want<'a> = Option<(&'a str, &'a [&'a str], Option<&'a str>)>;
        let cases: &[(&str, Want)] = &[
            ("switch main", Some(("switch", &["main"], None))),
            ("switch -q feat/x", Some(("switch", &["feat/x"], None))),
            ("switch -", Some(("switch", &["-"], None))),
            ("checkout main", Some(("switch", &["main"], None))),
            ("switch -c feat", Some(("switch -c", &["feat"], None))),
            (
                "switch --create=feat main",
                Some(("switch -c", &["feat"], None)),
            ),
            ("checkout -b feat", Some(("switch -c", &["feat"], None))),
            ("checkout -b feat v1", Some(("switch -c", &["feat"], None))),
            (
                "-c user.name=a switch -c feat",
                Some(("switch -c", &["feat"], None)),
            ),
            ("switch -C feat", None),
            ("switch --detach HEAD~1", None),
            ("switch -f main", None),
            ("switch --orphan x", None),
            ("switch -c feat --track origin/x", None),
            ("switch ../x", None),
            ("switch a..b", None),
            ("checkout -- a.txt", Some(("restore", &[], None))),
            ("checkout a.txt b.txt", Some(("restore", &[], None))),
            ("checkout .", Some(("restore", &[], None))),
            ("checkout -B x", None),
            ("restore a.txt", Some(("restore", &[], None))),
            (
                "restore --staged --source=HEAD a.txt",
                Some(("restore", &[], None)),
            ),
            ("restore -p a.txt", None),
            ("restore", None),
            ("branch feat", Some(("branch", &["feat"], None))),
            ("branch feat main", Some(("branch", &["feat"], None))),
            ("branch -d a b", Some(("branch -d", &["a", "b"], None))),
            ("branch -D a", Some(("branch -d", &["a"], None))),
            ("branch -m a b", None),
            ("branch -f a", None),
            ("branch -u origin/a", None),
            ("tag v1", Some(("tag", &["v1"], None))),
            ("tag v0.1.0 HEAD~1", Some(("tag", &["v0.1.0"], None))),
            ("tag -a v1 -m msg", Some(("tag", &["v1"], None))),
            ("tag -d v1", Some(("tag -d", &["v1"], None))),
            ("tag -s v1", None),
            ("tag -f v1", None),
            ("tag -F msg.txt v1", None),
            ("stash", Some(("stash", &[], None))),
            ("stash -u", Some(("stash", &[], None))),
            ("stash push -m wip", Some(("stash", &[], None))),
            ("stash push -p", None),
            ("stash pop", Some(("stash pop", &[], None))),
            ("stash apply stash@{1}", Some(("stash pop", &[], None))),
            ("stash drop", Some(("stash drop", &[], None))),
            ("stash clear", Some(("stash drop", &[], None))),
            ("stash list", None),
            ("stash show -p", None),
            ("stash branch x", None),
            ("merge feat", Some(("merge", &["feat"], None))),
            (
                "merge -q --no-ff --no-edit feat",
                Some(("merge", &["feat"], None)),
            ),
            ("merge --ff-only a b", Some(("merge", &["a", "b"], None))),
            ("merge -s ours feat", None),
            ("merge -X theirs feat", None),
            ("merge --squash feat", None),
            ("merge -S feat", None),
            ("merge --abort", None),
            ("init", Some(("init", &["master"], Some(".")))),
            ("init -q -b main", Some(("init", &["main"], Some(".")))),
            (
                "init --initial-branch=trunk sub",
                Some(("init", &["trunk"], Some("sub"))),
            ),
            (
                "-c init.defaultBranch=main init -q",
                Some(("init", &["main"], Some("."))),
            ),
            ("init --template=t", None),
            ("init --separate-git-dir=../g", None),
            ("init --bare", None),
            ("init -b ../x", None),
            ("commit -m x", None),
            ("rebase main", None),
        ];
        for (cmd, want) in cases {
            let args: Vec<String> = cmd.split_whitespace().map(String::from).collect();
            let got = local_form(&args);
            let got = got.as_ref().map(|l| {
                (
                    l.form,
                    l.names.iter().map(String::as_str).collect::<Vec<_>>(),
                    l.dir.as_deref(),
                )
            });
            let want = want.map(|(f, n, d)| (f, n.to_vec(), d));
            assert_eq!(got, want, "git {cmd}");
        }
    }
}
