//! `read_code {path, language?, digest?, max_files?}` (issue 25): what a source file — or every
//! source file of a directory beneath the grant — contains and, with an LLM key and the `llm`
//! grant, what it does. This module owns the action: which extractor a language gets (a parse
//! when a grammar exists, `syntax.rs`; line patterns otherwise, `patterns.rs`; the result says
//! which in `parser`), when the model digest runs (`model_digest.rs`), and the two modes (one
//! file, opened like every reader; a directory, walked by `walk.rs`).
//!
//! | file | owns |
//! |---|---|
//! | `syntax.rs` | tree-sitter extraction: Rust, Go, Python, JavaScript, TypeScript/TSX |
//! | `patterns.rs` | line patterns for languages without a grammar here (SQL) |
//! | `model_digest.rs` | the model's summary: fixed schema, prompt version, content cache |
//! | `walk.rs` | directory mode: the bounded, symlink-free, .gitignore-respecting walk |

mod model_digest;
mod patterns;
mod syntax;
mod walk;

use crate::actions::{ActionSpec, Grant, HandlerFuture, JobCtx, Outcome};
use crate::clients::paths::{self, Opened, OpenedDir};
use crate::fs::beneath::Beneath;
use crate::llm::JobUsage;
use crate::permset::PermissionSet;
use serde_json::{json, Value};
use std::path::Path;

pub const NAME: &str = "read_code";
const LANGUAGES: &str = "rust, go, python, javascript, typescript, sql";

pub fn language_of(path: &Path) -> Option<&'static str> {
    match path
        .extension()?
        .to_string_lossy()
        .to_ascii_lowercase()
        .as_str()
    {
        "rs" => Some("rust"),
        "go" => Some("go"),
        "py" | "pyi" => Some("python"),
        "js" | "mjs" | "cjs" | "jsx" => Some("javascript"),
        "ts" | "tsx" | "mts" | "cts" => Some("typescript"),
        "sql" => Some("sql"),
        _ => None,
    }
}

fn normalize_language(lang: &str) -> String {
    match lang.to_ascii_lowercase().as_str() {
        "rs" => "rust".into(),
        "py" => "python".into(),
        "js" => "javascript".into(),
        "ts" => "typescript".into(),
        other => other.to_string(),
    }
}

/// The extraction of `text` in `lang` (`path` tells TSX from TypeScript): a parse when a grammar
/// exists, the line patterns otherwise. `parser` names which.
pub fn extract(lang: &str, path: &Path, text: &str) -> Result<Value, String> {
    let lang = normalize_language(lang);
    let tsx = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("tsx"));
    let mut v = match syntax::extract(&lang, tsx, text) {
        Some(r) => r?,
        None => patterns::extract(&lang, text)
            .map_err(|_| format!("unsupported language {lang:?} ({LANGUAGES})"))?,
    };
    v["language"] = json!(lang);
    Ok(v)
}

pub fn spec() -> ActionSpec {
    ActionSpec {
        name: NAME,
        description: "What source code contains: a file, or every source file of a directory beneath the grant (bounded walk, .gitignore respected, symlinks never followed). Per file: functions and methods with their signature line (parent impl/class, decorators), types, imports, exports, tests, TODO/FIXME, line counts, from a tree-sitter parse for Rust, Go, Python, JavaScript, TypeScript (`parser` names the grammar) or line patterns for SQL (`parser`: \"patterns\"). With `digest` (default when an LLM key is configured and the client has the llm grant): the model's summary in `model_digest` — purpose, components, patterns, conventions, entry points — validated against a fixed schema and cached by content, so an unchanged file costs no tokens twice; a directory also gets a project-level digest.",
        aliases: &[],
        params_schema: || {
            super::path_schema(
                json!({
                    "language": {"type": "string", "description": "override the language found from the extension (file mode)"},
                    "digest": {"type": "boolean", "description": "ask the model for a structured summary (default: true when an LLM key is configured and the client has the llm grant)"},
                    "max_files": {"type": "integer", "minimum": 1, "maximum": walk::DEFAULT_LIMITS.max_files, "description": "directory mode: files read at most"}
                }),
                "file_path",
            )
        },
        grants: &[Grant::FileRead],
        permission_set: PermissionSet::Readonly,
        handler: crate::actions::Run::Async(handler),
        hidden: false,
        on_decision: None,
    }
}

fn handler(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        match run(&ctx, &params).await {
            Ok(o) | Err(o) => o,
        }
    })
}

/// Whether the model digest runs: Ok(None) yes, Ok(Some(why not)), Err when it was asked for
/// explicitly by a client without the llm grant.
fn digest_plan(ctx: &JobCtx, params: &Value) -> Result<Option<String>, Outcome> {
    let asked = params.get("digest").and_then(Value::as_bool);
    if asked == Some(false) {
        return Ok(Some("not requested".into()));
    }
    let granted = ctx.grants.as_ref().is_some_and(|g| g.has(Grant::Llm));
    if !granted {
        return match (asked, &ctx.grants) {
            (Some(true), Some(g)) => {
                Err(Outcome::denied(g.missing(Grant::Llm, "read_code digest")))
            }
            _ => Ok(Some("the client has no llm grant: extraction only".into())),
        };
    }
    if let Err(e) = ctx.llm.available() {
        return Ok(Some(format!(
            "no LLM key configured: extraction only ({e})"
        )));
    }
    Ok(None)
}

enum Target {
    File(Opened),
    Dir(OpenedDir),
}

async fn run(ctx: &JobCtx, params: &Value) -> Result<Outcome, Outcome> {
    let grants = ctx
        .grants
        .clone()
        .ok_or_else(|| Outcome::failed("internal error: grants not loaded for a reader"))?;
    let plan = digest_plan(ctx, params)?;
    let requested = super::requested_path(params);
    let deny = paths::deny_roots(&ctx.config.data_dir);
    let req = requested.clone();
    let target = tokio::task::spawn_blocking(move || {
        match paths::open_dir_for_read(&grants, &req, &deny).map_err(Outcome::from)? {
            Some(d) => Ok(Target::Dir(d)),
            None => paths::open_for_read(&grants, &req, &deny)
                .map(Target::File)
                .map_err(Outcome::from),
        }
    })
    .await
    .map_err(|e| Outcome::failed(format!("reader task failed: {e}")))??;
    let job = JobUsage::default();
    let mut result = match target {
        Target::File(f) => file_mode(ctx, params, &requested, f, plan.is_none(), &job).await?,
        Target::Dir(d) => dir_mode(ctx, params, &requested, d, plan.is_none(), &job).await?,
    };
    if let Some(why) = plan {
        result["model_digest"] = Value::Null;
        result["model_digest_status"] = json!(format!("skipped: {why}"));
    }
    Ok(Outcome::ok(result))
}

/// One file: the extraction (reader cache by path, size, mtime, params), then the digest.
async fn file_mode(
    ctx: &JobCtx,
    params: &Value,
    requested: &str,
    opened: Opened,
    with_digest: bool,
    job: &JobUsage,
) -> Result<Value, Outcome> {
    let (stores, params_c, req) = (ctx.stores.clone(), params.clone(), requested.to_string());
    let (mut value, hit, text) = tokio::task::spawn_blocking(move || {
        let text = super::read_text(&opened)?;
        let (v, hit) = super::cached_result(&stores, NAME, &opened, &req, &params_c, || {
            let lang = params_c
                .get("language")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| language_of(&opened.real_path).map(str::to_string))
                .ok_or_else(|| {
                    Outcome::failed(format!(
                        "{}: unknown language; pass \"language\" ({LANGUAGES})",
                        opened.real_path.display()
                    ))
                })?;
            let d = extract(&lang, &opened.real_path, &text).map_err(Outcome::failed)?;
            Ok((lang, d))
        })?;
        Ok::<_, Outcome>((v, hit, text))
    })
    .await
    .map_err(|e| Outcome::failed(format!("reader task failed: {e}")))??;
    super::count_cache(ctx, &mut value, hit);
    value["parser"] = value["digest"]["parser"].clone();
    if with_digest {
        let name = value["real_path"]
            .as_str()
            .and_then(|p| Path::new(p).file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let language = value["format"].as_str().unwrap_or("").to_string();
        merge(
            &mut value,
            file_digest(ctx, job, &name, &language, &text).await?,
        );
    }
    Ok(value)
}

async fn file_digest(
    ctx: &JobCtx,
    job: &JobUsage,
    name: &str,
    language: &str,
    text: &str,
) -> Result<Value, Outcome> {
    let subject = model_digest::Subject::File {
        name,
        language,
        text,
    };
    model_digest::digest(ctx, job, subject).await
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

/// A directory: the bounded walk, each file's extraction, and one project digest (made from the
/// files' outlines: one model call per directory, not one per file).
async fn dir_mode(
    ctx: &JobCtx,
    params: &Value,
    requested: &str,
    dir: OpenedDir,
    with_digest: bool,
    job: &JobUsage,
) -> Result<Value, Outcome> {
    let mut limits = walk::DEFAULT_LIMITS;
    if let Some(n) = params.get("max_files").and_then(Value::as_u64) {
        limits.max_files = (n as usize).clamp(1, walk::DEFAULT_LIMITS.max_files);
    }
    let (walked, real) = tokio::task::spawn_blocking(move || {
        let real = dir.real_path.clone();
        let fd = dir
            .fd
            .try_clone()
            .map_err(|e| Outcome::failed(format!("{}: {e}", real.display())))?;
        let b = Beneath::from_fd(fd);
        let mut w = walk::walk(&dir, &b, limits);
        let files: Vec<(String, Result<Value, String>)> = std::mem::take(&mut w.files)
            .into_iter()
            .map(|(rel, text)| {
                let lang = language_of(Path::new(&rel)).unwrap_or("");
                let d = extract(lang, Path::new(&rel), &text);
                (rel, d)
            })
            .collect();
        Ok::<_, Outcome>(((w, files), real))
    })
    .await
    .map_err(|e| Outcome::failed(format!("reader task failed: {e}")))??;
    let (w, files) = walked;
    let out_files: Vec<Value> = files
        .into_iter()
        .map(|(rel, extraction)| match extraction {
            Ok(d) => {
                json!({"path": rel, "language": d["language"], "parser": d["parser"], "digest": d})
            }
            Err(e) => json!({"path": rel, "error": e}),
        })
        .collect();
    let mut result = json!({
        "success": true,
        "path": requested,
        "real_path": real,
        "mode": "directory",
        "files": out_files,
        "file_count": out_files.len(),
        "skipped": w.skipped,
        "ignored_by_gitignore": w.ignored,
        "truncated": w.truncated,
        "limits": limits,
    });
    if with_digest {
        let name = real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| real.display().to_string());
        let outline = project_outline(&out_files);
        let d = model_digest::digest(
            ctx,
            job,
            model_digest::Subject::Project {
                name: &name,
                outline: &outline,
            },
        )
        .await?;
        merge(&mut result, d);
    }
    Ok(result)
}

/// What the project digest is made of: per file, its language and item names, one JSON line each.
fn project_outline(files: &[Value]) -> String {
    let names = |d: &Value, key: &str| -> Vec<Value> {
        d[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.get("name").cloned())
                    .take(60)
                    .collect()
            })
            .unwrap_or_default()
    };
    files
        .iter()
        .map(|f| {
            let d = &f["digest"];
            json!({
                "path": f["path"],
                "language": f["language"],
                "functions": names(d, "functions"),
                "types": names(d, "types"),
                "imports": names(d, "imports"),
                "exports": names(d, "exports"),
            })
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(file: &str, text: &str) -> Value {
        let p = Path::new(file);
        extract(language_of(p).unwrap(), p, text).unwrap()
    }

    fn find<'a>(v: &'a Value, key: &str, name: &str) -> &'a Value {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no {key} {name} in {v:#}"))
    }

    fn names(v: &Value, key: &str) -> Vec<String> {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn this_repositorys_sandbox_guarantees_file() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sandbox/guarantees.rs");
        let text = std::fs::read_to_string(&path).unwrap();
        let v = extract("rust", &path, &text).unwrap();
        assert_eq!(v["parser"], "tree-sitter-rust");
        assert_eq!(v["parse_errors"], 0);
        for f in ["for_set", "unmet", "table"] {
            let item = find(&v, "functions", f);
            assert_eq!(item["kind"], "function", "{item}");
            assert!(
                item["signature"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("pub fn {f}(")),
                "{item}"
            );
        }
        assert_eq!(find(&v, "types", "Mechanisms")["kind"], "struct");
        assert_eq!(
            names(&v, "tests"),
            [
                "abi_2_runs_every_set_with_namespaces_and_seccomp",
                "without_landlock_or_namespaces_nothing_is_guaranteed"
            ]
        );
        assert!(names(&v, "exports").contains(&"for_set".to_string()));
        assert!(names(&v, "exports").contains(&"Mechanisms".to_string()));
        let imports = names(&v, "imports");
        assert!(
            imports.contains(
                &"crate::permset::{Guarantee as Stated, PermissionSet, PROFILES}".to_string()
            ),
            "{imports:?}"
        );
        let total = text.lines().count() as u64;
        assert_eq!(v["lines"]["total"], total);
        assert!(
            v["lines"]["comment"].as_u64().unwrap() >= 18,
            "{}",
            v["lines"]
        );
    }

    #[test]
    fn rust_multi_line_signatures_methods_nested_items_and_attributes() {
        let v = x(
            "a.rs",
            "use std::io::{self, Read};\n\
             pub trait Store {\n    fn get(&self, k: &str) -> Option<String>;\n}\n\
             pub struct Mem;\n\
             impl Store for Mem {\n    fn get(\n        &self,\n        k: &str,\n    ) -> Option<String> {\n        fn inner(x: u8) -> u8 { x }\n        None\n    }\n}\n\
             // TODO: persist\n\
             #[tokio::test]\nasync fn works() {}\n",
        );
        let get: Vec<&Value> = v["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["name"] == "get")
            .collect();
        assert_eq!(get.len(), 2, "{v:#}");
        assert_eq!(get[0]["parent"], "Store");
        assert_eq!(get[1]["kind"], "method");
        assert_eq!(get[1]["parent"], "Mem");
        assert_eq!(
            get[1]["signature"],
            "fn get( &self, k: &str, ) -> Option<String>"
        );
        assert_eq!(get[1]["line"], 7);
        let inner = find(&v, "functions", "inner");
        assert_eq!(
            (inner["kind"].as_str(), inner["parent"].as_str()),
            (Some("nested"), Some("get"))
        );
        assert_eq!(
            find(&v, "functions", "works")["decorators"][0],
            "#[tokio::test]"
        );
        assert_eq!(names(&v, "tests"), ["works"]);
        assert_eq!(v["todos"][0]["tag"], "TODO");
        assert_eq!(v["todos"][0]["text"], "persist");
        assert_eq!(v["todos"][0]["line"], 15);
    }

    #[test]
    fn go_methods_multi_line_signatures_types_imports_exports_tests() {
        let v = x(
            "s.go",
            "package s\n\nimport (\n\t\"fmt\"\n\tlog \"github.com/x/log\"\n)\n\n\
             type Server struct{ n int }\ntype Handler interface{ Serve() }\n\n\
             // FIXME: close\nfunc (s *Server) Start(\n\taddr string,\n\tport int,\n) error {\n\tfmt.Println(addr)\n\treturn nil\n}\n\n\
             func helper() {}\n\nfunc TestStart(t *testing.T) {}\n",
        );
        assert_eq!(v["parser"], "tree-sitter-go");
        let start = find(&v, "functions", "Start");
        assert_eq!(
            (start["kind"].as_str(), start["parent"].as_str()),
            (Some("method"), Some("Server"))
        );
        assert_eq!(
            start["signature"],
            "func (s *Server) Start( addr string, port int, ) error"
        );
        assert_eq!(find(&v, "types", "Handler")["kind"], "interface");
        assert_eq!(names(&v, "imports"), ["fmt", "github.com/x/log"]);
        let ex = names(&v, "exports");
        assert!(
            ex.contains(&"Server.Start".into())
                && ex.contains(&"Server".into())
                && !ex.contains(&"helper".into()),
            "{ex:?}"
        );
        assert_eq!(names(&v, "tests"), ["TestStart"]);
        assert_eq!(v["todos"][0]["tag"], "FIXME");
    }

    #[test]
    fn a_python_signature_ends_at_the_declaration_not_the_next_lines_comment() {
        let v = x(
            "c.py",
            "def area(w: int, h: int) -> int:\n    # the next line's comment\n    return w * h\n\n\
             def f(x):  # same-line comment\n    return x\n",
        );
        assert_eq!(
            find(&v, "functions", "area")["signature"],
            "def area(w: int, h: int) -> int"
        );
        assert_eq!(find(&v, "functions", "f")["signature"], "def f(x)");
    }

    #[test]
    fn python_decorators_methods_nested_functions_and_all() {
        let v = x(
            "app.py",
            "import os, json as j\nfrom typing import Any\n\n__all__ = [\"App\"]\n\n\
             @dataclass(frozen=True)\nclass App:\n    @staticmethod\n    @cache\n    async def load(\n        path: str,\n        mode: int = 0,\n    ) -> Any:\n        def inner():\n            pass\n        return None\n\n\
             class TestApp:\n    def test_load(self):\n        pass\n\ndef test_top():\n    pass\n",
        );
        assert_eq!(v["parser"], "tree-sitter-python");
        let load = find(&v, "functions", "load");
        assert_eq!(
            (load["kind"].as_str(), load["parent"].as_str()),
            (Some("method"), Some("App"))
        );
        assert_eq!(load["decorators"], json!(["@staticmethod", "@cache"]));
        assert_eq!(
            load["signature"],
            "async def load( path: str, mode: int = 0, ) -> Any"
        );
        assert_eq!(find(&v, "functions", "inner")["parent"], "load");
        assert_eq!(
            find(&v, "types", "App")["decorators"][0],
            "@dataclass(frozen=True)"
        );
        assert_eq!(names(&v, "imports"), ["os", "json", "typing"]);
        assert_eq!(names(&v, "exports"), ["App"]);
        assert_eq!(names(&v, "tests"), ["TestApp", "test_load", "test_top"]);
    }

    #[test]
    fn javascript_classes_arrow_functions_requires_exports_and_tests() {
        let v = x(
            "m.js",
            "const fs = require('fs');\nimport { a } from './a.js';\n\
             export class Repo {\n  async find(\n    id,\n    opts,\n  ) {\n    function nested() {}\n    return id;\n  }\n}\n\
             export const add = (a, b) => a + b;\nexport default function main() {}\nexport { add as plus } from './b.js';\n\
             describe('repo', () => { it.only('finds', () => {}); });\n",
        );
        assert_eq!(v["parser"], "tree-sitter-javascript");
        let find_m = find(&v, "functions", "find");
        assert_eq!(find_m["parent"], "Repo");
        assert_eq!(find_m["signature"], "async find( id, opts, )");
        assert_eq!(find(&v, "functions", "nested")["parent"], "find");
        assert_eq!(find(&v, "functions", "add")["signature"], "add = (a, b)");
        assert_eq!(names(&v, "imports"), ["fs", "./a.js", "./b.js"]);
        let ex = names(&v, "exports");
        for e in ["Repo", "add", "default", "main", "plus"] {
            assert!(ex.contains(&e.to_string()), "{e} in {ex:?}");
        }
        assert_eq!(names(&v, "tests"), ["repo", "finds"]);
    }

    #[test]
    fn typescript_decorators_interfaces_and_tsx() {
        let v = x(
            "c.ts",
            "@Component({selector: 'x'})\nexport class Card {\n  @Input() title: string;\n  @HostListener('click')\n  onClick(\n    e: Event,\n  ): void {}\n}\n\
             export interface User { id: number }\ntype Id = string;\nenum Mode { A, B }\n\
             export function parse<T>(\n  s: string,\n): T { return JSON.parse(s); }\n",
        );
        assert_eq!(v["parser"], "tree-sitter-typescript");
        assert_eq!(v["parse_errors"], 0, "{v:#}");
        let on = find(&v, "functions", "onClick");
        assert_eq!(on["decorators"], json!(["@HostListener('click')"]));
        assert_eq!(on["parent"], "Card");
        assert_eq!(
            find(&v, "types", "Card")["decorators"][0],
            "@Component({selector: 'x'})"
        );
        assert_eq!(find(&v, "types", "User")["kind"], "interface");
        assert_eq!(find(&v, "types", "Mode")["kind"], "enum");
        assert_eq!(
            find(&v, "functions", "parse")["signature"],
            "function parse<T>( s: string, ): T"
        );
        let tsx = x(
            "v.tsx",
            "export const View = (p: {n: number}) => <div>{p.n}</div>;\n",
        );
        assert_eq!(tsx["parser"], "tree-sitter-typescript (tsx)");
        assert_eq!(tsx["parse_errors"], 0, "{tsx:#}");
        assert_eq!(names(&tsx, "functions"), ["View"]);
    }

    #[test]
    fn sql_has_no_grammar_here_and_uses_the_patterns_saying_so() {
        let v = x("s.sql", "-- TODO: index\nCREATE TABLE users(id INTEGER);\n");
        assert_eq!(v["parser"], "patterns");
        assert_eq!(names(&v, "types"), ["users"]);
        assert_eq!(v["todos"][0]["text"], "index");
    }

    #[test]
    fn broken_and_deeply_nested_hostile_input_is_reported_not_a_crash() {
        let v = x("b.py", "def ok():\n    pass\ndef broken(:\n");
        assert!(v["parse_errors"].as_u64().unwrap() >= 1, "{v:#}");
        assert!(names(&v, "functions").contains(&"ok".to_string()));
        let deep = format!("x = {}1{}\n", "(".repeat(50_000), ")".repeat(50_000));
        let v = x("d.py", &deep);
        assert_eq!(v["depth_limited"], syntax::MAX_DEPTH as u64);
    }
}
