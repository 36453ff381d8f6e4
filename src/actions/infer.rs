//! The `infer_permissions {code, language?}` action: the permission set, confidence, detected
//! patterns, operations, layers and fused tasks of agent JS/TS code (see `crate::infer`). Never
//! runs the code. Results are stored in lifecycle.db `inferred_permissions` (seed 002 AC5–6),
//! keyed by the code's hash, the language and the rules version (inference version + MCP
//! mapping fingerprint), so the same code is not analysed twice; a stored answer says
//! `"cached": true`.

use super::{ActionSpec, HandlerFuture, JobCtx, Outcome};
use crate::db::write_tx;
use crate::infer::{self, code_hash, InferReport, McpPermissions, INFER_VERSION};
use crate::permset::PermissionSet;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{json, Value};

pub fn specs() -> Vec<ActionSpec> {
    vec![ActionSpec {
        name: "infer_permissions",
        description: "Infers the permission set (minimal, readonly, filesystem, network-api, mcp-standard) that JS/TS agent code needs, with a confidence, the detected patterns, its code:* operations and tool calls (span, text, pure, layer), the layers that need human validation and the fused pure tasks. Never runs the code.",
        aliases: &[],
        params_schema: || {
            json!({
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "the JavaScript or TypeScript source"},
                    "language": {"type": "string", "enum": ["js", "ts"], "description": "default js"}
                },
                "required": ["code"],
                "additionalProperties": false
            })
        },
        grants: &[],
        permission_set: PermissionSet::Minimal,
        handler: crate::actions::Run::Async(infer_permissions),
        hidden: false,
        on_decision: None,
    }]
}

fn infer_permissions(ctx: JobCtx, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let (code, lang) = match super::decode::infer_permissions(&params) {
            Ok(p) => p,
            Err(e) => return Outcome::failed(e),
        };
        let mapping = match McpPermissions::load(ctx.config.mcp_permissions.as_deref()) {
            Ok(m) => m,
            Err(e) => return Outcome::failed(format!("{e:#}")),
        };
        let key = Key {
            hash: code_hash(&code),
            lang: lang.as_str(),
            rules: format!("{INFER_VERSION}+{}", mapping.fingerprint()),
        };
        let k = key.clone();
        match ctx.stores.lifecycle.call(move |c| Ok(lookup(c, &k)?)).await {
            Ok(Some(stored)) => {
                if let Ok(report) = serde_json::from_str::<InferReport>(&stored) {
                    return answer(&report, true);
                }
                tracing::warn!(
                    "stored inference for {} is unreadable; recomputing",
                    key.hash
                );
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("cannot read stored inferences: {e:#}"),
        }
        let report =
            match tokio::task::spawn_blocking(move || infer::infer_isolated(code, lang, mapping))
                .await
            {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => return Outcome::failed(format!("{e:#}")),
                Err(e) => return Outcome::failed(format!("inference task failed: {e}")),
            };
        match serde_json::to_string(&report) {
            Ok(text) => {
                let set = report.permission_set.as_str();
                let conf = report.confidence;
                let k = key.clone();
                let stored = ctx
                    .stores
                    .lifecycle
                    .call(move |c| Ok(store(c, &k, set, conf, &text)?))
                    .await;
                if let Err(e) = stored {
                    // The answer is still right; it will just be computed again next time.
                    tracing::warn!("cannot store the inference for {}: {e:#}", key.hash);
                }
            }
            Err(e) => tracing::warn!("cannot serialise the inference: {e}"),
        }
        answer(&report, false)
    })
}

fn answer(report: &InferReport, cached: bool) -> Outcome {
    match serde_json::to_value(report) {
        Ok(Value::Object(mut m)) => {
            m.insert("success".into(), json!(true));
            m.insert("cached".into(), json!(cached));
            Outcome::ok(Value::Object(m))
        }
        Ok(_) => Outcome::failed("inference report is not an object"),
        Err(e) => Outcome::failed(format!("cannot serialise the inference: {e}")),
    }
}

#[derive(Clone)]
struct Key {
    hash: String,
    lang: &'static str,
    rules: String,
}

/// The stored report, counting the hit.
fn lookup(conn: &mut Connection, k: &Key) -> rusqlite::Result<Option<String>> {
    write_tx(conn, |tx| {
        let report: Option<String> = tx
            .query_row(
                "SELECT report FROM inferred_permissions
                 WHERE code_hash = ?1 AND language = ?2 AND rules_version = ?3",
                params![k.hash, k.lang, k.rules],
                |r| r.get(0),
            )
            .optional()?;
        if report.is_some() {
            tx.execute(
                "UPDATE inferred_permissions SET hits = hits + 1, last_used_at = ?4
                 WHERE code_hash = ?1 AND language = ?2 AND rules_version = ?3",
                params![k.hash, k.lang, k.rules, crate::time::now_ms()],
            )?;
        }
        Ok(report)
    })
}

/// Seed 002 AC6's upsert: one row per key; a concurrent twin keeps the first row.
fn store(
    conn: &mut Connection,
    k: &Key,
    set: &str,
    conf: f64,
    report: &str,
) -> rusqlite::Result<()> {
    let now = crate::time::now_ms();
    write_tx(conn, |tx| {
        tx.execute(
            "INSERT INTO inferred_permissions(code_hash, language, rules_version, permission_set,
                                              confidence, report, created_at, last_used_at, hits)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, 0)
             ON CONFLICT(code_hash, language, rules_version) DO NOTHING",
            params![k.hash, k.lang, k.rules, set, conf, report, now],
        )?;
        Ok(())
    })
}
