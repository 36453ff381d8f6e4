//! npm's forms that reach no registry (issue 35), which its program entry's per-subcommand table
//! cannot tell apart from the ones that do: `npm init -y` (writes `package.json`; `npm init
//! NAME` runs `create-NAME` from the registry) and `npm install` of packages that are all local
//! paths (`./x.tgz`, `../vendor/x`, `file:./x`; a bare name, `user/repo`, a URL or `x@1` is the
//! registry's or a remote's). What is left is process and filesystem: lifecycle scripts run, on
//! the overlay, with no network — a package that needs the registry fails there instead.
//!
//! Only the `npm` program itself (not its `pnpm`/`yarn` aliases, whose specs read otherwise),
//! and only with flags of its entry's `local_install_flags` / `init_flags` (`src/programs/node.toml`): `-g`, `--prefix`, `--registry`,
//! `-w`, `--location` and anything unknown keep the registry's effects.

use super::knowledge::Effects;
use super::opts::Parsed;
use super::types::Category;

/// npm's named list `key` (its entry's `lists`: `install_spellings`, `local_install_flags`,
/// `init_flags`); empty when the table failed to load (then nothing is taken away).
fn list(key: &str) -> &'static [String] {
    crate::programs::table().map_or(&[], |t| t.list("npm", key))
}

/// A package spec that names a local path (npm-package-arg's file and directory specs, in
/// their explicit spellings only).
pub fn local_spec(spec: &str) -> bool {
    let path = spec.strip_prefix("file:").unwrap_or(spec);
    path.starts_with("./") || path.starts_with("../") || path.starts_with('/')
}

/// Refine npm's effects for `args` (the words after the program): see the module doc.
pub fn apply(prog: &str, p: &Parsed, fx: &mut Effects, notes: &mut Vec<String>) {
    if prog.rsplit('/').next() != Some("npm") {
        return;
    }
    let Some((sub, rest)) = p.operands.split_first() else {
        return;
    };
    let only = |allowed: &[String]| {
        p.opts
            .iter()
            .all(|o| allowed.iter().any(|a| super::opts::opt_matches(o, a)))
    };
    if sub == "init"
        && rest.is_empty()
        && (p.has("-y") || p.has("--yes"))
        && only(list("init_flags"))
    {
        *fx = Effects::default();
        fx.add(Category::Filesystem);
        notes.push(
            "`npm init -y` writes package.json from its defaults: no registry, no script".into(),
        );
    } else if list("install_spellings").contains(sub)
        && !rest.is_empty()
        && rest.iter().all(|s| local_spec(s))
        && only(list("local_install_flags"))
    {
        fx.remove(Category::Network);
        notes.push(
            "every package is a local path: no registry (its lifecycle scripts still run, without network)"
                .into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::opts::parse_opts;

    fn effects(cmd: &str) -> Vec<&'static str> {
        let args: Vec<String> = cmd.split_whitespace().skip(1).map(String::from).collect();
        let value_opts: Vec<String> = ["--loglevel", "--prefix", "--registry", "-w", "--workspace"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let p = parse_opts(&args, &value_opts, &[], &[], false);
        let mut fx = Effects::default();
        for c in [Category::Process, Category::Network, Category::Filesystem] {
            fx.add(c);
        }
        apply(
            cmd.split_whitespace().next().unwrap_or(""),
            &p,
            &mut fx,
            &mut Vec::new(),
        );
        fx.categories().into_iter().map(Category::as_str).collect()
    }

    #[test]
    fn only_local_installs_and_init_y_leave_the_registry_out() {
        let all = vec!["filesystem", "network", "process"];
        let local = vec!["filesystem", "process"];
        let cases: &[(&str, Vec<&str>)] = &[
            ("npm init -y", vec!["filesystem"]),
            ("npm init --yes --scope=@shop", vec!["filesystem"]),
            ("npm init", all.clone()),
            ("npm init vite -y", all.clone()),
            ("npm init -y -w pkg", all.clone()),
            (
                "npm install ../vendor/npm/tinylint-1.1.0.tgz",
                local.clone(),
            ),
            ("npm i --no-audit --no-fund -D ./x.tgz ../y", local.clone()),
            ("npm add file:../vendor/x", local.clone()),
            ("npm install ./x.tgz --loglevel error", local.clone()),
            ("npm install", all.clone()),
            ("npm install lodash", all.clone()),
            ("npm install ./x.tgz lodash", all.clone()),
            ("npm install user/repo", all.clone()),
            ("npm install vendor/x.tgz", all.clone()),
            ("npm install https://example.com/x.tgz", all.clone()),
            ("npm install git+file:///tmp/r.git", all.clone()),
            ("npm install -g ./x.tgz", all.clone()),
            ("npm install --global ./x.tgz", all.clone()),
            ("npm install --prefix /usr/local ./x.tgz", all.clone()),
            (
                "npm install --registry=http://127.0.0.1:1 ./x.tgz",
                all.clone(),
            ),
            ("npm install -w pkg ./x.tgz", all.clone()),
            ("npm install --foreground-scripts ./x.tgz", all.clone()),
            ("npm ci", all.clone()),
            ("pnpm add ./x.tgz", all.clone()),
            ("yarn init -y", all.clone()),
        ];
        for (cmd, want) in cases {
            assert_eq!(&effects(cmd), want, "{cmd}");
        }
    }
}
