//! TypeScript → JavaScript for the engine: oxc parses the (already instrumented) TypeScript body,
//! its TypeScript transform removes the types (interfaces, annotations, `as`, generics, enums
//! compiled, ...), and oxc's code generator prints plain JavaScript. No down-levelling: QuickJS
//! runs modern JavaScript. A body that does not parse, or a transform that reports an error,
//! is refused with the first diagnostic.

use oxc_allocator::Allocator;
use oxc_codegen::{Codegen, CodegenOptions};
use oxc_parser::{ParseOptions, Parser};
use oxc_semantic::SemanticBuilder;
use oxc_span::SourceType;
use oxc_transformer::{TransformOptions, Transformer};
use std::path::Path;

/// Strips the types of a TypeScript function body (top-level `await` and `return` allowed).
pub fn strip_types(ts: &str) -> Result<String, String> {
    let alloc = Allocator::default();
    let options = ParseOptions {
        allow_return_outside_function: true,
        ..ParseOptions::default()
    };
    let ret = Parser::new(&alloc, ts, SourceType::ts())
        .with_options(options)
        .parse();
    if ret.panicked || !ret.diagnostics.is_empty() {
        return Err(first(&ret.diagnostics, "the TypeScript parser gave up"));
    }
    let mut program = ret.program;
    // enum_eval: the transformer needs evaluated enum members to lower `enum` correctly.
    let sem = SemanticBuilder::new().with_enum_eval(true).build(&program);
    let scoping = sem.semantic.into_scoping();
    let t = Transformer::new(&alloc, Path::new("agent.ts"), &TransformOptions::default())
        .build_with_scoping(scoping, &mut program);
    if !t.diagnostics.is_empty() {
        return Err(first(&t.diagnostics, "TypeScript transform failed"));
    }
    let out = Codegen::new()
        .with_options(CodegenOptions::default())
        .build(&program);
    Ok(out.code)
}

fn first<D: std::fmt::Display>(d: &[D], fallback: &str) -> String {
    d.first()
        .map(|e| format!("cannot compile the TypeScript: {e}"))
        .unwrap_or_else(|| fallback.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_removed_and_top_level_await_and_return_survive() {
        let js = strip_types(
            "interface U { active: boolean }\nconst users: U[] = await f<U>();\nconst n = (users as any).length!;\nreturn users.filter((u: U): boolean => u.active);",
        )
        .unwrap();
        assert!(
            !js.contains("interface") && !js.contains(": U") && !js.contains(" as "),
            "{js}"
        );
        assert!(
            js.contains("await f()") && js.contains("return users.filter"),
            "{js}"
        );
    }

    #[test]
    fn enums_compile_and_errors_are_reported() {
        let js = strip_types("enum E { A, B }\nreturn E.B;").unwrap();
        assert!(!js.contains("enum E"), "{js}");
        assert!(!js.contains("import"), "{js}");
        assert!(strip_types("const x: = 1").is_err());
    }
}
