//! Permission inference, table-driven: seed 002's AC8 cases, AC3 patterns (nested, optional,
//! computed keys), the MCP mapping's config-loaded tools, aliasing and dynamic access. Each case
//! asserts the exact set, confidence and detected patterns.

use brainloop::infer::{infer, InferReport, Lang, McpPermissions};
use brainloop::permset::PermissionSet;
use PermissionSet::*;

struct Case {
    name: &'static str,
    lang: Lang,
    code: &'static str,
    set: PermissionSet,
    confidence: f64,
    patterns: &'static [&'static str],
}

const fn js(
    name: &'static str,
    code: &'static str,
    set: PermissionSet,
    confidence: f64,
    patterns: &'static [&'static str],
) -> Case {
    Case {
        name,
        lang: Lang::Js,
        code,
        set,
        confidence,
        patterns,
    }
}

const fn ts(
    name: &'static str,
    code: &'static str,
    set: PermissionSet,
    confidence: f64,
    patterns: &'static [&'static str],
) -> Case {
    Case {
        name,
        lang: Lang::Ts,
        code,
        set,
        confidence,
        patterns,
    }
}

fn run(cases: &[Case]) {
    let mapping = McpPermissions::defaults();
    let mut failures = Vec::new();
    for c in cases {
        let r = infer(c.code, c.lang, &mapping);
        let got: Vec<&str> = r.detected_patterns.iter().map(String::as_str).collect();
        if r.permission_set != c.set
            || (r.confidence - c.confidence).abs() > 1e-9
            || got != c.patterns
        {
            failures.push(format!(
                "{}: want {:?} {} {:?}, got {:?} {} {:?} (error {:?})",
                c.name,
                c.set,
                c.confidence,
                c.patterns,
                r.permission_set,
                r.confidence,
                got,
                r.error
            ));
        }
        assert_ne!(
            r.permission_set, Trusted,
            "{}: trusted is never inferred",
            c.name
        );
        if r.permission_set != Minimal || r.confidence < 0.5 {
            assert!(!r.pure, "{}: only minimal, confident code is pure", c.name);
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn seed_002_ac8() {
    run(&[
        js("fetch → network-api", r#"const r = await fetch("https://api.example.com/users");"#, NetworkApi, 0.90, &["fetch"]),
        js("mcp.fs.read → readonly", r#"const t = await mcp.fs.read({ path: "data/a.txt" });"#, Readonly, 0.90, &["mcp.fs.read"]),
        js("mcp.fs.write → filesystem", r#"await mcp.fs.write({ path: "/tmp/a.txt", content: "x" });"#, Filesystem, 0.90, &["mcp.fs.write"]),
        js("mcp.github.createIssue → network-api", r#"await mcp.github.createIssue({ title: "bug" });"#, NetworkApi, 0.90, &["mcp.github.createIssue"]),
        js("no I/O → minimal ≥ 0.95", "const xs = [1, 2, 3].map((n) => n * 2).filter((n) => n > 2);\nconst s = JSON.stringify(xs);", Minimal, 0.95, &[]),
        js("fs + network → mcp-standard", "const a = await mcp.fs.read({ path: \"a\" });\nawait fetch(\"https://x.example\", { method: \"POST\", body: a });", McpStandard, 0.70, &["fetch", "mcp.fs.read"]),
        js("malformed → minimal 0.0", "const = ;", Minimal, 0.0, &[]),
    ]);
}

#[test]
fn seed_002_ac3_and_ac7_patterns() {
    run(&[
        js("Deno.connect", r#"const c = await Deno.connect({ hostname: "x", port: 80 });"#, NetworkApi, 0.90, &["Deno.connect"]),
        js("several network patterns", "await fetch(\"https://a\");\nconst c = await Deno.connect({ port: 1 });", NetworkApi, 0.95, &["Deno.connect", "fetch"]),
        js("same pattern twice is one pattern", "await fetch(\"https://a\");\nawait fetch(\"https://b\");", NetworkApi, 0.90, &["fetch"]),
        js("Deno.readFile", r#"const b = await Deno.readFile("a.bin");"#, Readonly, 0.90, &["Deno.readFile"]),
        js("Deno.writeFile", r#"await Deno.writeFile("a.bin", new Uint8Array());"#, Filesystem, 0.90, &["Deno.writeFile"]),
        js("read + write files", "const t = await Deno.readTextFile(\"a\");\nawait Deno.writeTextFile(\"b\", t);", Filesystem, 0.95, &["Deno.readTextFile", "Deno.writeTextFile"]),
        js("two reads", "const t = await Deno.readTextFile(\"a\");\nconst u = await mcp.filesystem.read({ path: \"b\" });", Readonly, 0.95, &["Deno.readTextFile", "mcp.filesystem.read"]),
        js("Deno.env", r#"const home = Deno.env.get("HOME");"#, McpStandard, 0.80, &["Deno.env"]),
        js("process.env", "const k = process.env.API_KEY;", McpStandard, 0.80, &["process.env"]),
        js("env + network", "await fetch(process.env.URL);", McpStandard, 0.70, &["fetch", "process.env"]),
        js("mcp.slack", r#"await mcp.slack.send({ text: "hi" });"#, NetworkApi, 0.90, &["mcp.slack.send"]),
        js("unknown tool", "await mcp.frobnicator.run({});", McpStandard, 0.50, &["mcp.frobnicator.run"]),
        js("unknown tool beside a known one", "await mcp.frobnicator.run({});\nawait mcp.fs.read({});", McpStandard, 0.50, &["mcp.frobnicator.run", "mcp.fs.read"]),
        js("nested access read vs write", "const a = await mcp.filesystem.read({ path: \"a\" });\nawait mcp.filesystem.write({ path: \"b\", content: a });", Filesystem, 0.95, &["mcp.filesystem.read", "mcp.filesystem.write"]),
        js("nested tool namespace", "await mcp.github.issues.create({ title: \"x\" });", NetworkApi, 0.90, &["mcp.github.issues.create"]),
        js("optional chaining", "await mcp?.fs?.write?.({ path: \"a\", content: \"\" });", Filesystem, 0.90, &["mcp.fs.write"]),
        js("computed string keys", "await mcp[\"fs\"][\"write\"]({ path: \"a\" });", Filesystem, 0.90, &["mcp.fs.write"]),
        js("template key", "const t = await mcp[`fs`].read({ path: \"a\" });", Readonly, 0.90, &["mcp.fs.read"]),
        js("folded key", "await mcp.fs[\"wri\" + \"te\"]({ path: \"a\" });", Filesystem, 0.90, &["mcp.fs.write"]),
        js("call/apply of a tool op", "await mcp.fs.write.call(null, { path: \"a\" });", Filesystem, 0.90, &["mcp.fs.write"]),
        js("dynamic op on a known tool", "const op = pick();\nawait mcp.fs[op]({});", Filesystem, 0.90, &["mcp.fs[dynamic]"]),
        js("dynamic tool", "const t = pick();\nawait mcp[t].run({});", McpStandard, 0.50, &["mcp[dynamic]"]),
        js("db query (seed 000)", "const users = await mcp.db.query({ sql: \"SELECT 1\" });", Readonly, 0.90, &["mcp.db.query"]),
        js("db insert", "await mcp.db.insert({ table: \"t\" });", Filesystem, 0.90, &["mcp.db.insert"]),
        js("kubernetes is mixed", "await mcp.kubernetes.apply({});", McpStandard, 0.70, &["mcp.kubernetes.apply"]),
        js("playwright (config)", "await mcp.playwright.navigate({ url: \"x\" });", McpStandard, 0.70, &["mcp.playwright.navigate"]),
        js("postgres query (config)", "const r = await mcp.postgres.query({ sql: \"select 1\" });", Readonly, 0.90, &["mcp.postgres.query"]),
        js("sqlite write (config)", "await mcp.sqlite.write_query({ sql: \"delete from t\" });", Filesystem, 0.90, &["mcp.sqlite.write_query"]),
        js("brave_search (config)", "const r = await mcp.brave_search.search({ q: \"x\" });", NetworkApi, 0.90, &["mcp.brave_search.search"]),
        js("memory read (config)", "const g = await mcp.memory.read_graph({});", Readonly, 0.90, &["mcp.memory.read_graph"]),
        js("context7 (config)", "const d = await mcp.context7.get_library_docs({});", NetworkApi, 0.90, &["mcp.context7.get_library_docs"]),
        js("Deno.Command is process control", "const p = new Deno.Command(\"ls\");", McpStandard, 0.50, &["Deno.Command"]),
        js("process.exit", "process.exit(1);", McpStandard, 0.50, &["process.exit"]),
        js("strings are not code", "const s = \"fetch(https://evil) Deno.readFile process.env\";\nconst n = s.length;", Minimal, 0.95, &[]),
        js("console is not I/O of a permission", "console.log([1, 2].map((x) => x + 1));", Minimal, 0.95, &[]),
        js("a timer with a function is not eval", "setTimeout(() => {}, 10);", Minimal, 0.95, &[]),
        ts("typescript fetch", "const r: Response = await fetch(url as string);\nconst j: { a: number } = await r.json();", NetworkApi, 0.90, &["fetch"]),
        ts("typescript wrappers", "await (fetch as any)(u);\nawait fetch!(u);\nawait (<any>mcp).fs.write({});", McpStandard, 0.70, &["fetch", "mcp.fs.write"]),
        ts("types are not uses", "let f: typeof fetch;\ntype D = typeof Deno;\ninterface I { p: typeof process }\nconst x: number = 1;", Minimal, 0.95, &[]),
        ts("typescript needs --lang ts", "const x: number = 1; const y = x satisfies number;", Minimal, 0.95, &[]),
        js("typescript as js is unparseable", "const x: number = 1;", Minimal, 0.0, &[]),
    ]);
}

#[test]
fn aliasing_and_dynamic_access() {
    run(&[
        js(
            "const f = fetch",
            "const f = fetch;\nawait f(\"https://x\");",
            NetworkApi,
            0.90,
            &["fetch"],
        ),
        js(
            "let g; g = globalThis; g[\"fe\" + \"tch\"]",
            "let g;\ng = globalThis;\nawait g[\"fe\" + \"tch\"](\"https://x\");",
            NetworkApi,
            0.90,
            &["fetch"],
        ),
        js(
            "globalThis[\"fe\" + \"tch\"]",
            "await globalThis[\"fe\" + \"tch\"](\"https://x\");",
            NetworkApi,
            0.90,
            &["fetch"],
        ),
        js(
            "const key folded through a binding",
            "const k = \"fe\" + \"tch\";\nawait self[k](\"https://x\");",
            NetworkApi,
            0.90,
            &["fetch"],
        ),
        js(
            "window.fetch / this.fetch",
            "await window.fetch(\"a\");\nfunction g() { return this.fetch(\"b\"); }",
            NetworkApi,
            0.90,
            &["fetch"],
        ),
        js(
            "globalThis[dynamic]",
            "const name = atob(\"ZmV0Y2g=\");\nawait globalThis[name](\"https://x\");",
            McpStandard,
            0.50,
            &["globalThis[dynamic]"],
        ),
        js(
            "const { env } = process",
            "const { env } = process;\nconst k = env.API_KEY;",
            McpStandard,
            0.80,
            &["process.env"],
        ),
        js(
            "nested destructuring reads",
            "const { env: { HOME: h } } = process;",
            McpStandard,
            0.80,
            &["process.env"],
        ),
        js(
            "nested destructuring used",
            "const { env: { HOME } } = process;\nconsole.log(HOME);",
            McpStandard,
            0.80,
            &["process.env"],
        ),
        js(
            "const m = mcp.fs; m.write",
            "const m = mcp.fs;\nawait m.write({ path: \"a\" });",
            Filesystem,
            0.90,
            &["mcp.fs.write"],
        ),
        js(
            "const m = mcp.fs; m.read",
            "const m = mcp.fs;\nconst t = await m.read({ path: \"a\" });",
            Readonly,
            0.90,
            &["mcp.fs.read"],
        ),
        js(
            "const { write } = mcp.fs",
            "const { write: w } = mcp.fs;\nawait w({ path: \"a\" });",
            Filesystem,
            0.90,
            &["mcp.fs.write"],
        ),
        js(
            "alias of an alias, hoisted",
            "function go() { return d.readTextFile(\"x\"); }\nvar m = Deno;\nvar d = m;",
            Readonly,
            0.90,
            &["Deno.readTextFile"],
        ),
        js(
            "const { fetch: f } = globalThis",
            "const { fetch: f } = globalThis;\nawait f(\"x\");",
            NetworkApi,
            0.90,
            &["fetch"],
        ),
        js(
            "(0, eval)(...)",
            "(0, eval)(\"1 + 1\");",
            McpStandard,
            0.50,
            &["eval"],
        ),
        js("eval", "eval(\"1\");", McpStandard, 0.50, &["eval"]),
        js(
            "new Function",
            "const f = new Function(\"return 1\");",
            McpStandard,
            0.50,
            &["Function"],
        ),
        js(
            "import()",
            "const m = await import(\"node:fs\");",
            McpStandard,
            0.50,
            &["import()"],
        ),
        js(
            "static import",
            "import fs from \"node:fs\";\nconst x = 1;",
            McpStandard,
            0.50,
            &["import"],
        ),
        js(
            "require",
            "const fs = require(\"fs\");",
            McpStandard,
            0.50,
            &["require"],
        ),
        js(
            "setTimeout with a string",
            "setTimeout(\"fetch(1)\", 0);",
            McpStandard,
            0.50,
            &["setTimeout"],
        ),
        js(
            "constructor of a function",
            "[].filter.constructor(\"return 1\")();",
            McpStandard,
            0.50,
            &["constructor"],
        ),
        js(
            "dynamic method call",
            "const k = pick();\nconst v = obj[k](1);",
            McpStandard,
            0.50,
            &["computed-call"],
        ),
        js(
            "prototype mutation",
            "Array.prototype.filter = function () { return []; };",
            McpStandard,
            0.50,
            &["builtin-mutation"],
        ),
        js(
            "defineProperty on a built-in",
            "Object.defineProperty(Array.prototype, \"map\", { value: () => 1 });",
            McpStandard,
            0.50,
            &["builtin-mutation"],
        ),
        js(
            "overwriting fetch",
            "fetch = () => 1;",
            McpStandard,
            0.50,
            &["assign:fetch"],
        ),
        js(
            "fetch hidden in an array",
            "const fns = [fetch];\nawait fns[0](\"x\");",
            NetworkApi,
            0.90,
            &["fetch"],
        ),
        js(
            "fetch passed to a helper",
            "const r = await call(fetch, \"x\");",
            NetworkApi,
            0.90,
            &["fetch"],
        ),
        js(
            "bound fetch",
            "const f = fetch.bind(null);\nawait f(\"x\");",
            NetworkApi,
            0.90,
            &["fetch"],
        ),
        js(
            "Reflect.get(globalThis, ...)",
            "const f = Reflect.get(globalThis, \"fetch\");",
            McpStandard,
            0.50,
            &["globalThis"],
        ),
        js(
            "exported alias",
            "const f = fetch;\nexport { f };",
            NetworkApi,
            0.90,
            &["fetch"],
        ),
        js(
            "Worker",
            "const w = new Worker(\"x.js\");",
            McpStandard,
            0.50,
            &["Worker"],
        ),
        js(
            "WebSocket",
            "const w = new WebSocket(\"wss://x\");",
            NetworkApi,
            0.90,
            &["WebSocket"],
        ),
    ]);
}

#[test]
fn the_report_serialises_with_the_contract_fields() {
    let r: InferReport = infer(
        "const a = await fetch(\"x\");",
        Lang::Js,
        &McpPermissions::defaults(),
    );
    let v = serde_json::to_value(&r).unwrap();
    for k in [
        "permission_set",
        "confidence",
        "detected_patterns",
        "operations",
        "layers",
        "tasks",
        "code_hash",
        "pure",
        "requires_validation",
        "executed_path",
    ] {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    assert_eq!(v["permission_set"], "network-api");
    assert!(v.get("error").is_none());
    let bad = serde_json::to_value(infer("}{", Lang::Js, &McpPermissions::defaults())).unwrap();
    assert!(
        bad["error"].as_str().unwrap().contains("cannot parse"),
        "{bad}"
    );
    assert_eq!(bad["confidence"], 0.0);
    assert_eq!(bad["requires_validation"], true);
    assert_eq!(bad["pure"], false);
}
