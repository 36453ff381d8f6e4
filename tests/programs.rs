//! An operator's program entries (issue 52), through the real binary: a made-up tool taught
//! from a `programs.d/` beside the configuration file is classified, learned and protected by
//! its entry; an entry with a failing example, or one that weakens a built-in rule, is refused
//! by `brainloop programs check` and at start-up, naming the file, the line and the rule.

mod common;

use common::{final_result, submit, Env};
use std::path::{Path, PathBuf};

/// The made-up tool (a shell script in the fixed PATH, removed when the test ends): `save F`
/// writes F, `run F` executes F.
struct Tool {
    path: PathBuf,
}

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

const TOOL: &str = "brainloop-test-tool";

fn tool() -> Tool {
    assert!(
        nix::unistd::geteuid().is_root(),
        "CANNOT RUN HERE as a non-root user: the made-up program must live in the fixed PATH (/usr/local/bin), which only root may write; run this test as root"
    );
    let path = PathBuf::from("/usr/local/bin").join(TOOL);
    std::fs::write(
        &path,
        "#!/bin/sh\ncase \"$1\" in\n  save) mkdir -p \"$(dirname \"$2\")\" && echo saved > \"$2\" ;;\n  run) sh \"$2\" ;;\nesac\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    Tool { path }
}

fn entry() -> String {
    format!(
        r#"# a made-up tool: `save FILE` writes it, `run FILE` executes it; it runs `.bltool/hooks/*`
[program]
name = "{TOOL}"
effects = ["readonly"]
operands = "write"
sub_default = ["unknown"]

[[subcommand]]
name = "save"
effects = ["filesystem"]

[[subcommand]]
name = "run"
effects = ["process", "unknown"]

[[run_on_use]]
reason = "{TOOL} runs its hooks on every use"
paths = ['**/.bltool/hooks/**']

[[example]]
command = "{TOOL} save out.txt"
verdict = "ok"
category = "filesystem"

[[example]]
command = "{TOOL} run build.sh"
category = "unknown"

[[example]]
path = ".bltool/hooks/pre"
run_on_use = true

[[example]]
path = "notes/bltool.md"
run_on_use = false
"#
    )
}

/// A config file beside a `programs.d/` holding `files`; returns the config's path.
fn configure(env: &Env, files: &[(&str, &str)]) -> PathBuf {
    let dir = env.root.path().join("etc");
    let d = dir.join("programs.d");
    std::fs::create_dir_all(&d).unwrap();
    for e in std::fs::read_dir(&d).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    for (name, text) in files {
        std::fs::write(d.join(name), text).unwrap();
    }
    let cfg = dir.join("brainloop.toml");
    std::fs::write(&cfg, "signature_approvals = 1\n").unwrap();
    cfg
}

fn cli(env: &Env, cfg: &Path, args: &[&str]) -> (i32, String, String) {
    let mut a = vec!["--config", cfg.to_str().unwrap()];
    a.extend_from_slice(args);
    let (st, out, err) = env.cli(&a);
    (st.code().unwrap_or(-1), out, err)
}

#[test]
fn an_operator_entry_classifies_learns_and_protects_a_new_program() {
    common::require_sandbox();
    let _tool = tool();
    let env = Env::new();
    let cfg = configure(&env, &[("bltool.toml", &entry())]);
    let file = cfg.parent().unwrap().join("programs.d/bltool.toml");

    let (code, out, err) = cli(&env, &cfg, &["programs", "check", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("4 operator example(s) hold"), "{out}");
    let (code, out, err) = cli(&env, &cfg, &["programs", "show", TOOL]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("{}:2", file.display())), "{out}");
    assert!(out.contains("subcommand save: filesystem"), "{out}");
    assert!(out.contains("asks for **/.bltool/hooks/**"), "{out}");
    // the built-in ones still answer, naming their files
    let (_, out, _) = cli(&env, &cfg, &["programs", "show", "git"]);
    assert!(out.contains("src/programs/git.toml"), "{out}");

    // classified by the entry (without it the tool is an unknown program)
    let (_, out, _) = cli(
        &env,
        &cfg,
        &["check", "--json", "--", &format!("{TOOL} save a.txt")],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["category"], "filesystem", "{v}");
    let (_, out, _) = env.cli(&["check", "--json", "--", &format!("{TOOL} save a.txt")]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["category"], "unknown", "without the entry: {v}");

    let d = env.start(&[("BRAINLOOP_CONFIG", cfg.to_str().unwrap())]);
    // learned: one approval with --learn, then the same operation applies unasked
    let (id, st, v, err) = submit(&env, &format!("{TOOL} save a.txt"));
    assert_eq!(st, "pending_validation", "{err} {v}");
    // the operator's CLI reads the same configuration (and so the same entries) as the worker
    let (code, out, err) = cli(&env, &cfg, &["approve", &common::vid(&v), "--learn"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(final_result(&env, id).0, "succeeded");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(),
        "saved\n"
    );
    common::applied_unasked(&env, &format!("{TOOL} save b.txt"));
    // protected: its run-on-use path is never applied without a human, learned or not
    let (_, st, v, err) = submit(&env, &format!("{TOOL} save .bltool/hooks/pre"));
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(
        v["reasons"]
            .to_string()
            .contains("runs its hooks on every use"),
        "{v}"
    );
    assert!(!env.workspace.join(".bltool/hooks/pre").exists());
    drop(d);
}

/// Each refused entry: the file's name in programs.d, its text, what the refusal must say.
fn refused_cases() -> Vec<(&'static str, String, Vec<String>)> {
    vec![
        (
            "find.toml",
            "[program]\nname = \"find\"\neffects = [\"readonly\"]\n\n[[flag]]\nname = \"-exec\"\nlearn = \"neutral\"\n".into(),
            vec!["find.toml:6".into(), "find -exec: `learn = \"neutral\"`".into(), "src/programs/files.toml:".into()],
        ),
        (
            "find2.toml",
            "[program]\nname = \"find\"\neffects = [\"readonly\"]\n[[flag]]\nname = \"-exec\"\neffect = \"remove\"\neffects = [\"process\"]\n".into(),
            vec!["find2.toml:5".into(), "takes effects away".into(), "src/programs/files.toml:".into()],
        ),
        (
            "git.toml",
            "[program]\nname = \"git\"\neffects = [\"unknown\"]\n[[subcommand]]\nname = \"push\"\neffects = [\"readonly\"]\n".into(),
            vec!["git.toml:5".into(), "git push".into(), "drop".into(), "src/programs/git.toml:".into()],
        ),
        (
            "bad-example.toml",
            entry().replace("category = \"filesystem\"", "category = \"pure\""),
            vec!["bad-example.toml:2".into(), "category filesystem (the example says pure)".into()],
        ),
    ]
}

#[test]
fn an_entry_that_weakens_a_builtin_rule_or_fails_its_example_is_refused() {
    let env = Env::new();
    for (name, text, want) in refused_cases() {
        // `programs check FILE`
        let cfg = configure(&env, &[]);
        let f = env.root.path().join(name);
        std::fs::write(&f, &text).unwrap();
        let (code, out, err) = cli(&env, &cfg, &["programs", "check", f.to_str().unwrap()]);
        assert_eq!(code, 1, "{name}: {out}{err}");
        for w in &want {
            assert!(
                err.contains(w.as_str()),
                "{name}: programs check should say {w:?}: {err}"
            );
        }
        // at start-up: the worker refuses to start, naming the same
        let cfg = configure(&env, &[(name, &text)]);
        let (code, out, err) = cli(
            &env,
            &cfg,
            &["run", "--workspace", env.workspace.to_str().unwrap()],
        );
        assert_eq!(code, 1, "{name}: the worker must not start: {out}{err}");
        for w in &want {
            assert!(
                err.contains(w.as_str()),
                "{name}: start-up should say {w:?}: {err}"
            );
        }
    }
}

#[test]
fn program_entries_where_the_agent_could_write_them_are_refused() {
    let env = Env::new();
    // inside the workspace
    let d = env.workspace.join("programs.d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("x.toml"),
        "[program]\nname = \"x\"\neffects = [\"pure\"]\n",
    )
    .unwrap();
    let cfg = env.workspace.join("brainloop.toml");
    std::fs::write(&cfg, format!("workspace = {:?}\n", env.workspace)).unwrap();
    let (code, _, err) = cli(&env, &cfg, &["programs", "list"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("lies inside"), "{err}");
    // writable by others
    let cfg = configure(
        &env,
        &[("x.toml", "[program]\nname = \"x\"\neffects = [\"pure\"]\n")],
    );
    let f = cfg.parent().unwrap().join("programs.d/x.toml");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, _, err) = cli(&env, &cfg, &["programs", "list"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("lets others write it"), "{err}");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, out, err) = cli(&env, &cfg, &["programs", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("programs.d/x.toml:1"), "{out}");
}
