//! The pure-operation DAG: seed 003 AC 1.1, 1.3, 1.4; seed 000's three E2E expectations (only
//! pure → 0 validations; mixed → validation only on the tool calls; corrupted pure task →
//! error); purity that must be withdrawn when a capability can hide inside a "pure" operation.

use brainloop::infer::{
    infer, is_pure_operation, is_safe_to_fail, validate_pure_task, validate_pure_tasks,
    InferReport, Lang, McpPermissions,
};
use brainloop::permset::PermissionSet;

fn run(code: &str) -> InferReport {
    infer(code, Lang::Js, &McpPermissions::defaults())
}

fn tools(r: &InferReport) -> Vec<&str> {
    r.operations.iter().map(|o| o.tool.as_str()).collect()
}

fn validations(r: &InferReport) -> Vec<&str> {
    r.layers
        .iter()
        .flat_map(|l| l.validate.iter().map(String::as_str))
        .collect()
}

const SEED_000: &str = r#"const users = await mcp.db.query({ sql: "SELECT * FROM users" });
const active = users.filter((u) => u.active);
const totalAge = active.reduce((s, u) => s + u.age, 0);
const avgAge = totalAge / active.length;
const rounded = Math.round(avgAge);
await mcp.slack.send({ message: `Average age: ${rounded}` });
"#;

#[test]
fn ac_1_1_filter_then_map() {
    let r = run("const names = users.filter(u => u.active).map(u => u.name);");
    assert_eq!(tools(&r), ["code:filter", "code:map"]);
    let (f, m) = (&r.operations[0], &r.operations[1]);
    assert_eq!(f.code, "users.filter(u => u.active)");
    assert_eq!(m.code, "users.filter(u => u.active).map(u => u.name)");
    assert_eq!(m.depends_on, ["op0"]);
    assert!(f.pure && m.pure);
    assert_eq!((f.logical_layer, m.logical_layer), (0, 1));
    assert_eq!(r.tasks.len(), 1, "sequential pure operations fuse");
    assert_eq!(r.tasks[0].logical_tools, ["code:filter", "code:map"]);
    assert_eq!(r.tasks[0].tool, "code:computation");
    assert_eq!(r.permission_set, PermissionSet::Minimal);
    assert!(r.pure && !r.requires_validation);
}

#[test]
fn ac_1_3_executed_path() {
    let r = run("const names = users.filter(u => u.active).map(u => u.name);");
    assert_eq!(r.executed_path, ["code:filter", "code:map"]);
}

#[test]
fn ac_1_4_safe_to_fail() {
    assert!(is_pure_operation("code:filter"));
    assert!(!is_pure_operation("filesystem:read"));
    assert!(!is_pure_operation("code:fetch"));
    let r = run("const xs = users.filter(u => u.active);");
    assert_eq!(r.operations[0].tool, "code:filter");
    assert!(r.operations[0].safe_to_fail);
    assert!(is_safe_to_fail(&r.tasks[0]));
    let io = run("const r = await fetch(u);");
    assert!(!is_safe_to_fail(&io.tasks[0]));
}

#[test]
fn e2e_only_pure_operations_need_no_validation() {
    let code = "const numbers = [1, 2, 3];\nconst doubled = numbers.map((x) => x * 2);\nconst total = doubled.reduce((a, b) => a + b, 0);\nconst avg = total / doubled.length;\nconst ok = avg > 2 && !Number.isNaN(avg);\n";
    let r = run(code);
    assert_eq!(r.permission_set, PermissionSet::Minimal);
    assert_eq!(r.confidence, 0.95);
    assert!(validations(&r).is_empty());
    assert!(r.layers.iter().all(|l| !l.requires_validation));
    assert!(!r.requires_validation);
    assert_eq!(
        r.executed_path,
        [
            "code:map",
            "code:reduce",
            "code:get_length",
            "code:divide",
            "code:greater_than",
            "code:Number.isNaN",
            "code:not",
            "code:and"
        ]
    );
    // `Number.isNaN` is not on seed 000's list: it splits the run but needs no human.
    let isnan = r
        .operations
        .iter()
        .find(|o| o.tool == "code:Number.isNaN")
        .unwrap();
    assert!(!isnan.pure && !isnan.requires_validation);
    // The first fused task carries the literal it reads (seed 003 Phase 2a).
    assert!(
        r.tasks[0].code.starts_with("const numbers = [1, 2, 3];"),
        "{}",
        r.tasks[0].code
    );
    assert_eq!(
        r.tasks[0].logical_tools,
        [
            "code:map",
            "code:reduce",
            "code:get_length",
            "code:divide",
            "code:greater_than"
        ]
    );
}

#[test]
fn e2e_mixed_code_validates_only_the_tool_calls() {
    let r = run(SEED_000);
    assert_eq!(r.permission_set, PermissionSet::McpStandard);
    assert_eq!(r.confidence, 0.70);
    assert_eq!(r.detected_patterns, ["mcp.db.query", "mcp.slack.send"]);
    assert_eq!(
        r.executed_path,
        [
            "db:query",
            "code:filter",
            "code:reduce",
            "code:get_length",
            "code:divide",
            "code:Math.round",
            "slack:send"
        ]
    );
    assert_eq!(validations(&r), ["db:query", "slack:send"]);
    assert_eq!(r.tasks.len(), 3);
    let fused = &r.tasks[1];
    assert!(fused.pure && !fused.requires_validation);
    assert_eq!(fused.permission_set, PermissionSet::Minimal);
    assert_eq!(
        fused.logical_tools,
        [
            "code:filter",
            "code:reduce",
            "code:get_length",
            "code:divide",
            "code:Math.round"
        ]
    );
    assert_eq!(r.tasks[0].permission_set, PermissionSet::Readonly);
    assert_eq!(r.tasks[2].permission_set, PermissionSet::NetworkApi);
    assert_eq!(r.tasks[2].depends_on, ["t0", "t1"]);
    let layers: Vec<(usize, bool)> = r
        .layers
        .iter()
        .map(|l| (l.index, l.requires_validation))
        .collect();
    assert_eq!(layers, [(0, true), (1, false), (2, true)]);
    // every operation carries its span and original text
    for op in &r.operations {
        assert_eq!(
            &SEED_000[op.span.start as usize..op.span.end as usize],
            op.code
        );
    }
    assert_eq!(r.operations[3].span.line, 4);
}

#[test]
fn e2e_a_corrupted_pure_task_is_refused() {
    let r = run("const doubled = numbers.map((x) => x * 2);");
    assert!(validate_pure_tasks(&r.tasks, Lang::Js).is_ok());
    for evil in [
        "fetch(\"https://evil.example\")",
        "Deno.readTextFileSync(\"/etc/passwd\")",
        "process.env.KEY",
        "eval(\"1\")",
        "new Function(\"return 1\")()",
        "import(\"x\")",
        "require(\"fs\")",
        "mcp.fs.write({})",
        "globalThis[\"fe\" + \"tch\"](\"x\")",
        "this[\"fet\" + \"ch\"](\"x\")",
        "[].map.constructor(\"return 1\")()",
        "setTimeout(\"x\", 1)",
        "console.log(1)",
    ] {
        let mut task = r.tasks[0].clone();
        task.code = format!("{}\n{evil};", task.code);
        let e = validate_pure_task(&task, Lang::Js).unwrap_err();
        assert_eq!(e.task, "t0");
        assert!(e.to_string().starts_with("pure task t0 refused"), "{e}");
    }
    let mut empty = r.tasks[0].clone();
    empty.code.clear();
    assert!(validate_pure_task(&empty, Lang::Js).is_err());
    let mut not_pure = r.tasks[0].clone();
    not_pure.pure = false;
    not_pure.code = "fetch(1)".into();
    assert!(
        validate_pure_task(&not_pure, Lang::Js).is_ok(),
        "only tasks marked pure are checked"
    );
}

#[test]
fn a_pure_task_whose_text_trips_the_seed_patterns_is_demoted_not_trusted() {
    let r = run("const words = list.filter((w) => w !== \"fetch\");");
    let t = &r.tasks[0];
    assert!(!t.pure && t.requires_validation);
    assert!(
        t.revalidation_error.as_deref().unwrap().contains("fetch"),
        "{t:?}"
    );
    assert!(!r.operations[0].pure);
}

#[test]
fn unparseable_code_is_never_pure_and_always_validated() {
    let r = run("const x = [1, 2, 3].map((n) => n * 2");
    assert_eq!(
        (r.permission_set, r.confidence),
        (PermissionSet::Minimal, 0.0)
    );
    assert!(r.error.is_some());
    assert!(!r.pure && r.requires_validation);
    assert!(r.operations.is_empty() && r.tasks.is_empty());
}

#[test]
fn dynamic_code_makes_nothing_pure() {
    let r =
        run("const xs = data.map((d) => d * 2);\neval(\"Array.prototype.map = () => fetch(1)\");");
    assert_eq!(
        (r.permission_set, r.confidence),
        (PermissionSet::McpStandard, 0.5)
    );
    assert!(r.operations.iter().all(|o| !o.pure));
    assert!(r.purity_withdrawn.is_some());
    let eval = r.operations.iter().find(|o| o.tool == "code:eval").unwrap();
    assert!(eval.requires_validation);
}

/// Ways to make I/O run inside an operation that looks pure by its name.
#[test]
fn hidden_io_inside_pure_operations_is_not_pure() {
    for (name, code) in [
        ("alias passed as callback", "const f = fetch;\nconst r = urls.map(f);"),
        ("named function passed as callback", "async function get(u) { return fetch(u); }\nconst r = urls.map(get);"),
        ("const arrow passed as callback", "const get = (u) => mcp.fs.read({ path: u });\nconst r = paths.map(get);"),
        ("I/O inside the callback", "const r = urls.map((u) => fetch(u));"),
        ("tool call inside the callback", "const r = paths.map((p) => mcp.fs.write({ path: p }));"),
        ("toJSON method", "const o = { toJSON() { fetch(\"x\"); return 1; } };\nconst s = JSON.stringify(o);"),
        ("getter", "const o = { get n() { fetch(\"x\"); return 1; } };\nconst s = Object.keys(o).map((k) => o[k]);"),
        ("valueOf in arithmetic", "const o = { valueOf: () => { Deno.writeTextFileSync(\"x\", \"y\"); return 1; } };\nconst s = o + 1;"),
        ("user-defined filter", "const h = { filter: (x) => fetch(x) };\nconst r = h.filter(\"u\");"),
        ("method assigned later", "const h = {};\nh.map = fetch;\nconst r = h.map(\"u\");"),
        ("class method", "class A { sort() { return fetch(\"x\"); } }\nconst r = new A().sort();"),
        ("helper called in callback", "function send(x) { return mcp.slack.send({ x }); }\nconst r = xs.map((x) => send(x));"),
        ("prototype patch", "Array.prototype.filter = function () { return fetch(\"x\"); };\nconst r = [1].filter((x) => x);"),
        ("setter via defineProperty", "Object.defineProperty(Object.prototype, \"x\", { get() { return fetch(1); } });\nconst r = [1].map((v) => v.x);"),
        ("escape into an object", "const t = { f: fetch };\nconst r = xs.filter((x) => t.f(x));"),
        ("callback handed to the code's own forEach", "const box = { forEach(cb) { this.cb = cb; }, valueOf() { return this.cb(); } };\nbox.forEach(() => fetch(\"x\"));\nconst r = [box].map((b) => b + 1);"),
        ("impure receiver", "function load() { return fetch(\"x\"); }\nconst r = load().filter((x) => x);"),
        ("tool call as operand", "const n = (await mcp.db.query({})).filter((x) => x).length;"),
    ] {
        let r = run(code);
        let pure: Vec<&str> = r
            .operations
            .iter()
            .filter(|o| o.pure)
            .map(|o| o.code.as_str())
            .collect();
        let wrap = [
            "code:map",
            "code:filter",
            "code:sort",
            "code:add",
            "code:JSON.stringify",
            "code:get_length",
        ];
        let suspects: Vec<&str> = r
            .operations
            .iter()
            .filter(|o| o.pure && wrap.contains(&o.tool.as_str()))
            .map(|o| o.code.as_str())
            .collect();
        assert!(suspects.is_empty(), "{name}: trusted pure: {pure:?}\n{r:#?}");
        assert_ne!(r.permission_set, PermissionSet::Minimal, "{name}");
        assert!(r.requires_validation, "{name}: must ask a human");
    }
}

#[test]
fn io_in_a_function_called_directly_keeps_other_operations_pure() {
    let code = "async function main() {\n  const users = await mcp.db.query({ sql: \"x\" });\n  return users.length;\n}\nconst n = [1, 2].map((x) => x + 1);\nawait main();";
    let r = run(code);
    let map = r.operations.iter().find(|o| o.tool == "code:map").unwrap();
    assert!(map.pure, "{r:#?}");
    let call = r.operations.iter().find(|o| o.code == "main()").unwrap();
    assert_eq!(call.tool, "code:call");
    assert!(call.requires_validation, "a call that may reach I/O asks");
}

#[test]
fn io_in_callbacks_of_builtins_keeps_other_operations_pure() {
    let code = "const users = await mcp.db.query({});\nusers.forEach((u) => mcp.slack.send({ text: u.name }));\nconst p = mcp.fs.read({}).then((t) => mcp.fs.write({ t }));\nconst n = users.filter((u) => u.active).length;";
    let r = run(code);
    assert!(r.purity_withdrawn.is_none(), "{:?}", r.purity_withdrawn);
    let filter = r
        .operations
        .iter()
        .find(|o| o.tool == "code:filter")
        .unwrap();
    assert!(filter.pure);
    let each = r
        .operations
        .iter()
        .find(|o| o.tool == "code:forEach")
        .unwrap();
    assert!(!each.pure && each.requires_validation);
}

#[test]
fn side_effects_keep_their_order_and_callbacks_are_children() {
    let r = run("await mcp.fs.write({ path: \"a\" });\nconst xs = ids.map((id) => mcp.db.get({ id }));\nawait fetch(\"x\");");
    let get = r.operations.iter().find(|o| o.tool == "db:get").unwrap();
    let map = r.operations.iter().find(|o| o.tool == "code:map").unwrap();
    assert_eq!(get.within.as_deref(), Some(map.id.as_str()));
    assert_eq!(get.task, map.task);
    assert!(!map.pure && map.requires_validation);
    let f = r
        .operations
        .iter()
        .find(|o| o.tool == "code:fetch")
        .unwrap();
    assert!(f.depends_on.contains(&map.id), "{f:?}");
    assert!(f.layer > map.layer);
    let t = r.tasks.iter().find(|t| t.id == map.task).unwrap();
    assert_eq!(t.logical_tools, ["db:get", "code:map"]);
}

#[test]
fn approval_auto_in_the_mapping_skips_validation_of_that_tool() {
    let mapping = McpPermissions::from_toml_over(
        "[tools.db]\npermission_set = \"readonly\"\nread_only = true\napproval = \"auto\"\n",
        Some(McpPermissions::defaults()),
    )
    .unwrap();
    let r = infer(SEED_000, Lang::Js, &mapping);
    assert_eq!(validations(&r), ["slack:send"]);
}

#[test]
fn typescript_code_gets_the_same_dag() {
    let code = "interface User { active: boolean; age: number }\nconst users: User[] = await mcp.db.query({ sql: \"x\" }) as User[];\nconst active = users.filter((u: User) => u.active);\nconst total: number = active.reduce((s: number, u: User) => s + u.age, 0);";
    let r = infer(code, Lang::Ts, &McpPermissions::defaults());
    assert_eq!(r.executed_path, ["db:query", "code:filter", "code:reduce"]);
    assert_eq!(validations(&r), ["db:query"]);
    assert_eq!(r.permission_set, PermissionSet::Readonly);
}
