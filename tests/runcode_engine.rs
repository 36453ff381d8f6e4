//! The embedded engine on its own: values, TypeScript, console capture, the mcp bridge, and
//! every escape we could think of — each must fail inside the engine.

use brainloop::infer::Lang;
use brainloop::runcode::engine::{Failure, Limits};
use brainloop::runcode::standalone::{run_standalone, SeenCall};
use serde_json::{json, Value};
use std::time::Duration;

fn run_with(
    code: &str,
    lang: Lang,
    limits: Limits,
) -> (Result<Value, Failure>, Vec<String>, Vec<SeenCall>) {
    let (f, calls) = run_standalone(code, lang, limits, |c| {
        if c.tool == "brainloop" && c.op == "echo" {
            Ok(c.params.clone())
        } else {
            Err(format!("mcp.{}.{} refused", c.tool, c.op))
        }
    })
    .unwrap();
    (f.value, f.logs, calls)
}

fn js(code: &str) -> Result<Value, Failure> {
    run_with(code, Lang::Js, Limits::default()).0
}

fn small() -> Limits {
    Limits {
        cpu: Duration::from_millis(500),
        memory_bytes: 16 * 1024 * 1024,
        ..Limits::default()
    }
}

#[test]
fn pure_code_returns_its_value() {
    assert_eq!(js("return 1 + 2").unwrap(), json!(3));
    assert_eq!(
        js("const users = [{n: 'a', active: true}, {n: 'b', active: false}];\nreturn users.filter(u => u.active).map(u => u.n);").unwrap(),
        json!(["a"])
    );
    assert_eq!(
        js("const x = await Promise.resolve(5); return {x};").unwrap(),
        json!({"x": 5})
    );
    assert_eq!(js("let y = 1;").unwrap(), Value::Null, "no return → null");
}

#[test]
fn typescript_types_are_stripped() {
    let (v, _, _) = run_with(
        "interface U { name: string; active: boolean }\nconst us: U[] = [{name: 'x', active: true}];\nfunction pick<T extends U>(a: T[]): string[] { return a.filter((u): boolean => u.active).map(u => u.name as string); }\nenum E { A = 1, B }\nreturn { names: pick(us), b: E.B };",
        Lang::Ts,
        Limits::default(),
    );
    assert_eq!(v.unwrap(), json!({"names": ["x"], "b": 2}));
}

#[test]
fn console_is_captured_and_capped() {
    let (v, logs, _) = run_with(
        "console.log('a', 1, {b: 2}); console.warn('w'); return null;",
        Lang::Js,
        Limits::default(),
    );
    assert!(v.is_ok());
    assert_eq!(
        logs,
        vec!["a 1 {\"b\":2}".to_string(), "[warn] w".to_string()]
    );
    let lim = Limits {
        max_log_bytes: 100,
        ..Limits::default()
    };
    let (f, _) = run_standalone(
        "for (let i = 0; i < 1000; i++) console.log('xxxxxxxxxx'); return 1;",
        Lang::Js,
        lim,
        |_| Err("x".into()),
    )
    .unwrap();
    assert!(f.logs_truncated);
    assert!(f.logs.iter().map(|l| l.len()).sum::<usize>() <= 100);
    assert_eq!(f.value.unwrap(), json!(1));
}

#[test]
fn tool_calls_leave_through_the_bridge_with_their_site() {
    let (v, _, calls) = run_with(
        "const r = await mcp.brainloop.echo({a: 1});\nconst [p, q] = await Promise.all([mcp.brainloop.echo({b: 2}), mcp.brainloop.echo({c: 3})]);\nreturn [r, p, q];",
        Lang::Js,
        Limits::default(),
    );
    assert_eq!(v.unwrap(), json!([{"a": 1}, {"b": 2}, {"c": 3}]));
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|c| c.site.is_some()), "{calls:?}");
    // An alias taken at run time carries no site.
    let (v, _, calls) = run_with(
        "const t = ['brain', 'loop'].join(''); return await mcp[t].echo({z: 1});",
        Lang::Js,
        Limits::default(),
    );
    assert_eq!(v.unwrap(), json!({"z": 1}));
    assert_eq!(calls[0].site, None);
}

#[test]
fn a_refused_call_is_a_catchable_error() {
    let v = js("try { await mcp.slack.send({text: 'x'}); return 'no'; } catch (e) { return String(e.message); }").unwrap();
    assert_eq!(v, json!("mcp.slack.send refused"));
    match js("await mcp.slack.send({});") {
        Err(Failure::Thrown(m)) => assert!(m.contains("refused"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Non-object arguments never leave.
    let v = js("try { await mcp.brainloop.echo(1, 2); } catch (e) { return e.message; }").unwrap();
    assert!(v.as_str().unwrap().contains("one object argument"));
}

#[test]
fn host_capabilities_are_simply_absent() {
    for g in [
        "fetch",
        "require",
        "process",
        "Deno",
        "Bun",
        "setTimeout",
        "setInterval",
        "XMLHttpRequest",
        "WebSocket",
        "Atomics",
        "SharedArrayBuffer",
        "WebAssembly",
        "performance",
        "std",
        "os",
        "print",
        "scriptArgs",
        "importScripts",
        "Worker",
        "module",
        "exports",
        "__dirname",
    ] {
        let v = js(&format!("return typeof {g};")).unwrap();
        assert_eq!(v, json!("undefined"), "{g} must not exist");
        let v = js(&format!("return typeof globalThis['{g}'];")).unwrap();
        assert_eq!(v, json!("undefined"), "globalThis.{g} must not exist");
    }
}

#[test]
fn escapes_fail() {
    let attempts = [
        // network, modules, process, env
        "await fetch('http://127.0.0.1/')",
        "require('fs').readFileSync('/etc/passwd')",
        "process.env.HOME",
        "Deno.readTextFileSync('/etc/passwd')",
        "await import('fs')",
        "await import('/etc/passwd')",
        "await import('data:text/javascript,export default 1')",
        // code generation reaching host objects: nothing host-side exists to reach
        "new Function('return process')().env",
        "(function(){}).constructor('return require')()('fs')",
        "(await (async()=>{}).constructor('return Deno')()).env",
        "eval('process').exit(1)",
        "globalThis.constructor.constructor('return this.process')().env",
        // prototype tricks
        "({}).__proto__.constructor.constructor('return fetch')()('x')",
        "Object.getPrototypeOf(mcp).x.y",
        "mcp.constructor.constructor('return process')()",
        "Reflect.getPrototypeOf(console.log).constructor('return require')()",
        // the host bridge object is not reachable
        "host.call('brainloop', 'execute_bash', 0, '{}', () => 1, () => 1)",
        "__bl_standalone(0, 1, mcp.brainloop, 'echo', [{}])",
        "arguments[0](0, 1, mcp.brainloop, 'echo', [{}])",
        "Object.getOwnPropertyNames(globalThis).filter(n => n.startsWith('__bl'))[0].x",
        // std/os of quickjs-libc
        "std.loadFile('/etc/passwd')",
        "os.exec(['id'])",
    ];
    for a in attempts {
        let r = js(&format!("return {a};"));
        assert!(
            matches!(r, Err(Failure::Thrown(_))),
            "escape attempt must throw: {a} → {r:?}"
        );
    }
}

#[test]
fn tampering_with_builtins_does_not_redirect_calls() {
    // Polluted prototypes and replaced built-ins after start-up: the bridge uses its own copies.
    let (v, _, calls) = run_with(
        "Object.prototype.get = () => 1; WeakMap.prototype.get = () => ['brainloop', 'execute_bash'];\nReflect.apply = () => 'hijacked'; JSON.stringify = () => '{\"command\":\"rm -rf /\"}';\nconst r = await mcp.brainloop.echo({ok: true});\nreturn r;",
        Lang::Js,
        Limits::default(),
    );
    assert_eq!(v.unwrap(), json!({"ok": true}));
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].op.as_str(), calls[0].params.as_str()),
        ("echo", "{\"ok\":true}")
    );
    // mcp cannot be replaced or extended
    let v = js("'use strict'; try { globalThis.mcp = 1; } catch (e) {} try { mcp.x = 1 } catch (e) {} return typeof mcp.x;").unwrap();
    assert_eq!(v, json!("object"));
}

#[test]
fn infinite_loop_hits_the_cpu_limit_and_cannot_be_caught() {
    let (v, _, _) = run_with(
        "try { while (true) {} } catch (e) { return 'caught'; }",
        Lang::Js,
        small(),
    );
    match v {
        Err(Failure::Limit(l)) => assert!(l.starts_with("cpu"), "{l}"),
        other => panic!("{other:?}"),
    }
    let (v, _, _) = run_with(
        "for (;;) { try { while (true) {} } catch (e) {} }",
        Lang::Js,
        small(),
    );
    assert!(
        matches!(v, Err(Failure::Limit(ref l)) if l.starts_with("cpu")),
        "{v:?}"
    );
    // inside a promise job too
    let (v, _, _) = run_with(
        "await Promise.resolve().then(() => { while (true) {} });",
        Lang::Js,
        small(),
    );
    assert!(
        matches!(v, Err(Failure::Limit(ref l)) if l.starts_with("cpu")),
        "{v:?}"
    );
}

#[test]
fn memory_bomb_hits_the_memory_limit() {
    let (v, _, _) = run_with(
        "const a = []; while (true) a.push(new Array(100000).fill(1.5));",
        Lang::Js,
        small(),
    );
    assert!(
        matches!(v, Err(Failure::Limit(ref l)) if l.starts_with("memory")),
        "{v:?}"
    );
    // QuickJS's own string-length bound (2^30) or the memory limit: never a value.
    let (v, _, _) = run_with("let s = 'x'; while (true) s = s + s;", Lang::Js, small());
    assert!(v.is_err(), "{v:?}");
}

#[test]
fn deep_recursion_hits_the_stack_limit() {
    let (v, _, _) = run_with(
        "function f(n) { return f(n + 1) + 1; } return f(0);",
        Lang::Js,
        small(),
    );
    assert!(
        matches!(v, Err(Failure::Limit(ref l)) if l.starts_with("stack")),
        "{v:?}"
    );
}

#[test]
fn a_promise_that_never_settles_is_reported() {
    assert_eq!(js("await new Promise(() => {});"), Err(Failure::Stuck));
}

#[test]
fn randomness_and_time_are_recorded_for_replay() {
    let a = js("return [Math.random(), Math.random()];").unwrap();
    let b = js("return [Math.random(), Math.random()];").unwrap();
    assert_eq!(a, b, "same seed, same draws");
    let v = js("const t = Date.now(); const d = new Date(); return [typeof t, d.getTime() >= t, typeof Date(), new Date(0).getTime()];").unwrap();
    assert_eq!(v, json!(["number", true, "string", 0]));
}

#[test]
fn too_many_tool_calls_is_a_limit() {
    let lim = Limits {
        max_calls: 5,
        ..Limits::default()
    };
    let (f, _) = run_standalone(
        "for (let i = 0; i < 10; i++) await mcp.brainloop.echo({i});",
        Lang::Js,
        lim,
        |c| Ok(c.params.clone()),
    )
    .unwrap();
    assert!(
        matches!(f.value, Err(Failure::Limit(ref l)) if l.starts_with("tool calls")),
        "{:?}",
        f.value
    );
}

#[test]
fn unparseable_code_never_runs() {
    assert!(
        run_standalone("return (", Lang::Js, Limits::default(), |_| Err(
            String::new()
        ))
        .is_err()
    );
}
