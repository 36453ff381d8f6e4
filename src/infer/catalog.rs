//! The data tables of code inference: seed 000's pure and unsafe `code:*` operations, the
//! operator → operation names, and what each sensitive global (`fetch`, `Deno.*`, `process.*`,
//! dynamic-code entry points, ...) gives access to. Pure data; no AST here.

use super::Category;

/// Seed 000's pure operations (plus `code:includes`'s string twin and a few obviously pure
/// array/string methods): no I/O beyond their arguments, safe to run without a human.
pub const PURE_OPERATIONS: &[&str] = &[
    // Array
    "code:filter",
    "code:map",
    "code:reduce",
    "code:reduceRight",
    "code:flatMap",
    "code:flat",
    "code:find",
    "code:findIndex",
    "code:findLast",
    "code:findLastIndex",
    "code:some",
    "code:every",
    "code:sort",
    "code:reverse",
    "code:slice",
    "code:concat",
    "code:join",
    "code:includes",
    "code:indexOf",
    "code:lastIndexOf",
    "code:at",
    // String
    "code:split",
    "code:replace",
    "code:replaceAll",
    "code:trim",
    "code:trimStart",
    "code:trimEnd",
    "code:toLowerCase",
    "code:toUpperCase",
    "code:substring",
    "code:substr",
    "code:match",
    "code:matchAll",
    "code:padStart",
    "code:padEnd",
    "code:startsWith",
    "code:endsWith",
    "code:toFixed",
    // Object
    "code:Object.keys",
    "code:Object.values",
    "code:Object.entries",
    "code:Object.fromEntries",
    "code:Object.assign",
    // Arithmetic
    "code:add",
    "code:subtract",
    "code:multiply",
    "code:divide",
    "code:modulo",
    "code:power",
    // Comparison
    "code:equals",
    "code:not_equals",
    "code:greater_than",
    "code:less_than",
    "code:greater_or_equal",
    "code:less_or_equal",
    // Logic
    "code:and",
    "code:or",
    "code:not",
    // Math
    "code:Math.round",
    "code:Math.floor",
    "code:Math.ceil",
    "code:Math.abs",
    "code:Math.min",
    "code:Math.max",
    "code:Math.sqrt",
    "code:Math.pow",
    "code:Math.trunc",
    "code:Math.sign",
    // Property access
    "code:get_property",
    "code:get_length",
    "code:array_access",
    // JSON
    "code:JSON.parse",
    "code:JSON.stringify",
    // Conversions
    "code:Number",
    "code:String",
    "code:Boolean",
    "code:Array.from",
    "code:Array.isArray",
];

/// Seed 000's operations that are async or have side effects: never pure.
pub const UNSAFE_OPERATIONS: &[&str] = &[
    "code:Promise.all",
    "code:Promise.race",
    "code:Promise.allSettled",
    "code:await",
    "code:eval",
    "code:Function",
    "code:setTimeout",
    "code:setInterval",
    "code:fetch",
    "code:console.log",
];

/// Seed 000 / 003: `code:*` operations on the pure list.
pub fn is_pure_operation(tool: &str) -> bool {
    PURE_OPERATIONS.contains(&tool)
}

/// Seed 003: `code:` prefix convention.
pub fn is_code_operation(tool: &str) -> bool {
    tool.starts_with("code:")
}

/// Methods that call a function argument (so a function passed to them runs inside the op).
pub const CALLBACK_METHODS: &[&str] = &[
    "filter",
    "map",
    "reduce",
    "reduceRight",
    "flatMap",
    "find",
    "findIndex",
    "findLast",
    "findLastIndex",
    "some",
    "every",
    "sort",
    "replace",
    "replaceAll",
    "forEach",
    "from",
    "parse",
    "stringify",
    "then",
    "catch",
    "finally",
];

/// Global objects whose members are the globals themselves.
pub const GLOBAL_OBJECTS: &[&str] = &[
    "globalThis",
    "window",
    "self",
    "global",
    "frames",
    "top",
    "parent",
];

/// Built-in namespaces whose static calls are named `code:<Ns>.<method>`.
pub const BUILTIN_NAMESPACES: &[&str] = &[
    "Math", "Object", "JSON", "Array", "Number", "String", "Promise", "console", "Date", "Reflect",
];

/// Built-ins whose mutation (assignment, `Object.defineProperty`, ...) would change what a
/// "pure" operation does.
pub const BUILTINS: &[&str] = &[
    "Array",
    "Object",
    "String",
    "Number",
    "Boolean",
    "Math",
    "JSON",
    "Promise",
    "Function",
    "RegExp",
    "Date",
    "Map",
    "Set",
    "WeakMap",
    "WeakSet",
    "Symbol",
    "Reflect",
    "Error",
    "BigInt",
    "Proxy",
    "Intl",
    "console",
    "globalThis",
    "window",
    "self",
    "global",
];

/// Constructors that only build data (`new Map()`): no operation of their own.
pub const DATA_CONSTRUCTORS: &[&str] = &[
    "Map",
    "Set",
    "Date",
    "Array",
    "Object",
    "RegExp",
    "Error",
    "TypeError",
    "RangeError",
    "WeakMap",
    "WeakSet",
    "URL",
    "URLSearchParams",
    "Uint8Array",
    "TextEncoder",
    "TextDecoder",
];

/// Whether `name` (a global identifier) can reach I/O or run code, so references to it are
/// tracked through aliases.
pub fn is_sensitive_root(name: &str) -> bool {
    GLOBAL_OBJECTS.contains(&name)
        || matches!(
            name,
            "fetch"
                | "XMLHttpRequest"
                | "WebSocket"
                | "EventSource"
                | "WebTransport"
                | "Deno"
                | "process"
                | "Bun"
                | "mcp"
                | "eval"
                | "Function"
                | "require"
                | "importScripts"
                | "Worker"
                | "SharedWorker"
                | "WebAssembly"
                | "setTimeout"
                | "setInterval"
                | "navigator"
                | "location"
                | "document"
                | "localStorage"
                | "sessionStorage"
                | "indexedDB"
                | "caches"
                | "module"
                | "postMessage"
        )
}

/// What a `Deno.<name>` member gives access to.
pub fn deno_member(name: &str) -> Category {
    match name {
        "connect" | "connectTls" | "listen" | "listenTls" | "listenDatagram" | "resolveDns"
        | "startTls" | "serve" | "serveHttp" | "upgradeWebSocket" | "createHttpClient"
        | "HttpClient" | "networkInterfaces" => Category::Network,
        "readFile" | "readFileSync" | "readTextFile" | "readTextFileSync" | "readDir"
        | "readDirSync" | "stat" | "statSync" | "lstat" | "lstatSync" | "realPath"
        | "realPathSync" | "readLink" | "readLinkSync" | "cwd" | "watchFs" => Category::Read,
        "writeFile" | "writeFileSync" | "writeTextFile" | "writeTextFileSync" | "remove"
        | "removeSync" | "rename" | "renameSync" | "mkdir" | "mkdirSync" | "makeTempDir"
        | "makeTempDirSync" | "makeTempFile" | "makeTempFileSync" | "copyFile" | "copyFileSync"
        | "chmod" | "chmodSync" | "chown" | "chownSync" | "symlink" | "symlinkSync" | "link"
        | "linkSync" | "truncate" | "truncateSync" | "create" | "createSync" | "open"
        | "openSync" | "utime" | "utimeSync" | "umask" => Category::Write,
        "env" => Category::Env,
        _ => Category::Process,
    }
}

/// The operation name of a binary operator, if it has one.
pub fn binary_operation(op: oxc_ast::ast::BinaryOperator) -> Option<&'static str> {
    use oxc_ast::ast::BinaryOperator as B;
    Some(match op {
        B::Addition => "code:add",
        B::Subtraction => "code:subtract",
        B::Multiplication => "code:multiply",
        B::Division => "code:divide",
        B::Remainder => "code:modulo",
        B::Exponential => "code:power",
        B::Equality | B::StrictEquality => "code:equals",
        B::Inequality | B::StrictInequality => "code:not_equals",
        B::GreaterThan => "code:greater_than",
        B::LessThan => "code:less_than",
        B::GreaterEqualThan => "code:greater_or_equal",
        B::LessEqualThan => "code:less_or_equal",
        _ => return None,
    })
}

/// Impure operations that never call user code nor reach I/O (output only): they break a run of
/// pure operations but never need a human.
pub fn is_inert_impure(tool: &str) -> bool {
    tool.starts_with("code:console.") || matches!(tool, "code:Date.now" | "code:Math.random")
}
