//! The reader actions (`read_sqlite`, `read_markdown`, `read_code`, `read_config`): each opens one
//! file under the client's FILE_READ grants (beneath its granted root, see `clients::paths`),
//! builds a structured digest of it, and caches the digest by path + size + nanosecond mtime
//! (consulted only after the grant check, so a cached digest never leaks past a revoke).
//! Seed 001's parameter names `file_path` / `db_path` are accepted as aliases of `path`.
//! `read_code` (its own handler in `code/`) also takes a directory and may ask the model.

mod cache;
pub mod code;
pub mod config;
pub mod markdown;
pub mod sqlite;

use super::{ActionSpec, Grant, HandlerFuture, JobCtx, Outcome};
use crate::clients::paths::{self, Opened};
use crate::permset::PermissionSet;
use serde_json::{json, Value};
use std::io::Read;
use std::os::unix::fs::MetadataExt;

/// Files larger than this are refused by the text readers (bytes).
pub const MAX_TEXT_BYTES: u64 = 8 * 1024 * 1024;

fn path_schema(extra: Value, alias: &str) -> Value {
    let mut props = json!({
        "path": {"type": "string", "minLength": 1, "maxLength": 4096,
                 "description": "absolute, or relative to the workspace"},
    });
    props[alias] = json!({"type": "string", "minLength": 1, "maxLength": 4096, "description": "alias of path"});
    if let (Some(p), Some(e)) = (props.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    json!({
        "type": "object",
        "properties": props,
        "anyOf": [{"required": ["path"]}, {"required": [alias]}],
        "additionalProperties": false
    })
}

pub fn specs() -> Vec<ActionSpec> {
    vec![
        ActionSpec {
            name: "read_sqlite",
            description: "Digest of a SQLite database: tables with columns, row counts and sample rows, views, indexes, triggers. Opened read-only (no ATTACH, trusted_schema off, 5 s budget); never brainloop's own databases.",
            aliases: &[],
            params_schema: || {
                path_schema(
                    json!({"max_sample_rows": {"type": "integer", "minimum": 0, "maximum": 100}}),
                    "db_path",
                )
            },
            grants: &[Grant::FileRead],
            permission_set: PermissionSet::Readonly,
            handler: crate::actions::Run::Async(|ctx, p| handle(ctx, p, Kind::Sqlite)),
            hidden: false,
            on_decision: None,
        },
        ActionSpec {
            name: "read_markdown",
            description: "Digest of a Markdown file: title, headings tree, sections with word counts, links, code blocks.",
            aliases: &[],
            params_schema: || path_schema(json!({}), "file_path"),
            grants: &[Grant::FileRead],
            permission_set: PermissionSet::Readonly,
            handler: crate::actions::Run::Async(|ctx, p| handle(ctx, p, Kind::Markdown)),
            hidden: false,
            on_decision: None,
        },
        code::spec(),
        ActionSpec {
            name: "read_config",
            description: "Structure of a configuration file (TOML, YAML, JSON, INI, .env) with the values of secret-looking keys masked.",
            aliases: &[],
            params_schema: || path_schema(json!({"format": {"type": "string", "enum": ["toml", "yaml", "json", "ini", "env"]}}), "file_path"),
            grants: &[Grant::FileRead],
            permission_set: PermissionSet::Readonly,
            handler: crate::actions::Run::Async(|ctx, p| handle(ctx, p, Kind::Config)),
            hidden: false,
            on_decision: None,
        },
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sqlite,
    Markdown,
    Config,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Sqlite => "read_sqlite",
            Kind::Markdown => "read_markdown",
            Kind::Config => "read_config",
        }
    }
}

fn requested_path(params: &Value) -> String {
    ["path", "file_path", "db_path"]
        .iter()
        .find_map(|k| params.get(*k).and_then(Value::as_str))
        .unwrap_or_default()
        .to_string()
}

fn handle(ctx: JobCtx, params: Value, kind: Kind) -> HandlerFuture {
    Box::pin(async move {
        let Some(grants) = ctx.grants.clone() else {
            return Outcome::failed("internal error: grants not loaded for a reader");
        };
        let requested = requested_path(&params);
        let deny = paths::deny_roots(&ctx.config.data_dir);
        let stores = ctx.stores.clone();
        let work = tokio::task::spawn_blocking(move || -> Result<(Value, bool), Outcome> {
            let opened = paths::open_for_read(&grants, &requested, &deny).map_err(Outcome::from)?;
            cached_result(&stores, kind.name(), &opened, &requested, &params, || {
                digest(kind, &opened, &params)
            })
        })
        .await;
        match work {
            Ok(Ok((mut v, hit))) => {
                count_cache(&ctx, &mut v, hit);
                Outcome::ok(v)
            }
            Ok(Err(o)) => o,
            Err(e) => Outcome::failed(format!("reader task failed: {e}")),
        }
    })
}

/// The reader result for `opened`: from the cache (action, real path, size, ns mtime, params)
/// or built from `compute`'s (format, digest) and stored; `true` on a cache hit.
pub(super) fn cached_result(
    stores: &crate::db::Stores,
    action: &str,
    opened: &Opened,
    requested: &str,
    params: &Value,
    compute: impl FnOnce() -> Result<(String, Value), Outcome>,
) -> Result<(Value, bool), Outcome> {
    let meta = opened
        .file
        .metadata()
        .map_err(|e| Outcome::failed(format!("{requested}: {e}")))?;
    let mtime_ns = meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128;
    let key = cache::key(action, &opened.real_path, meta.len(), mtime_ns, params);
    if let Some(v) = cache::get(stores, &key) {
        return Ok((v, true));
    }
    let (format, digest) = compute()?;
    let value = json!({
        "success": true,
        "path": requested,
        "real_path": opened.real_path,
        "size": meta.len(),
        "format": format,
        "digest": digest,
    });
    cache::put(
        stores,
        &key,
        &opened.real_path,
        meta.len(),
        mtime_ns,
        &value,
    );
    Ok((value, false))
}

/// Counts a cache hit or miss and says which in the result (`cached`).
pub(super) fn count_cache(ctx: &JobCtx, v: &mut Value, hit: bool) {
    ctx.stats.incr(
        if hit {
            "reader_cache_hit"
        } else {
            "reader_cache_miss"
        },
        1.0,
    );
    v["cached"] = json!(hit);
}

/// (format, digest) of an opened file.
fn digest(kind: Kind, opened: &Opened, params: &Value) -> Result<(String, Value), Outcome> {
    match kind {
        Kind::Sqlite => {
            let rows = params
                .get("max_sample_rows")
                .and_then(Value::as_u64)
                .unwrap_or(5) as usize;
            sqlite::digest(opened, rows)
                .map(|d| ("sqlite".to_string(), d))
                .map_err(|e| Outcome::failed(format!("{}: {e:#}", opened.real_path.display())))
        }
        Kind::Markdown => {
            let text = read_text(opened)?;
            Ok(("markdown".into(), markdown::digest(&text)))
        }
        Kind::Config => {
            let text = read_text(opened)?;
            let fmt = params
                .get("format")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| config::format_of(&opened.real_path).map(str::to_string));
            let Some(fmt) = fmt else {
                return Err(Outcome::failed(format!(
                    "{}: unknown config format; pass \"format\" (toml, yaml, json, ini, env)",
                    opened.real_path.display()
                )));
            };
            config::digest(&fmt, &text)
                .map(|d| (fmt, d))
                .map_err(|e| Outcome::failed(format!("{}: {e}", opened.real_path.display())))
        }
    }
}

pub(crate) fn read_text(opened: &Opened) -> Result<String, Outcome> {
    let mut buf = Vec::new();
    (&opened.file)
        .take(MAX_TEXT_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Outcome::failed(format!("{}: {e}", opened.real_path.display())))?;
    if buf.len() as u64 > MAX_TEXT_BYTES {
        return Err(Outcome::failed(format!(
            "{} is larger than {MAX_TEXT_BYTES} bytes",
            opened.real_path.display()
        )));
    }
    String::from_utf8(buf)
        .map_err(|_| Outcome::failed(format!("{} is not UTF-8 text", opened.real_path.display())))
}
