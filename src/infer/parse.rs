//! Parsing agent code with oxc: JavaScript as an ES module, TypeScript with its types, top-level
//! `await` and `return` allowed (agent snippets use both). Any syntax error makes the code
//! unparseable. Before oxc sees the text, a cheap lexical scan bounds its nesting: oxc's parser
//! (and any AST walk) recurses once per nesting level, and a crafted input must never overflow
//! the stack of the process analysing it.

use super::Lang;
use oxc_allocator::Allocator;
use oxc_ast::ast::Program;
use oxc_parser::{ParseOptions, Parser};
use oxc_span::SourceType;

/// Largest input analysed (bytes). Agent code is far smaller; the action's params cap is 1 MiB.
pub const MAX_CODE_BYTES: usize = 1024 * 1024;
/// Deepest nesting accepted by the pre-scan (brackets + unclosed prefix operators).
pub const MAX_NESTING: usize = 400;
/// Deepest expression/statement nesting the AST walks descend into; deeper code (which the
/// pre-scan should already have refused) is reported as unparseable.
pub const MAX_AST_DEPTH: usize = 2000;

/// Parses `code`; the error names the first syntax problem.
pub fn parse<'a>(alloc: &'a Allocator, code: &'a str, lang: Lang) -> Result<Program<'a>, String> {
    if code.len() > MAX_CODE_BYTES {
        return Err(format!(
            "code is {} bytes; at most {MAX_CODE_BYTES} are analysed",
            code.len()
        ));
    }
    if code.contains('\0') {
        return Err("code contains a NUL byte".into());
    }
    let depth = nesting_estimate(code);
    if depth > MAX_NESTING {
        return Err(format!(
            "code is nested too deeply to analyse safely (estimate {depth} > {MAX_NESTING})"
        ));
    }
    let source_type = match lang {
        Lang::Js => SourceType::mjs(),
        Lang::Ts => SourceType::ts(),
    };
    let options = ParseOptions {
        allow_return_outside_function: true,
        ..ParseOptions::default()
    };
    let ret = Parser::new(alloc, code, source_type)
        .with_options(options)
        .parse();
    if ret.panicked || !ret.diagnostics.is_empty() {
        let first = ret
            .diagnostics
            .iter()
            .next()
            .map(|d| d.to_string())
            .unwrap_or_else(|| "the parser gave up".into());
        return Err(format!(
            "cannot parse the code as {}: {first}",
            lang.as_str()
        ));
    }
    Ok(ret.program)
}

/// An upper estimate of how deeply the parser will recurse: bracket depth plus, per bracket
/// level, the prefix/right-associative operators not yet closed by a `;` or `,`. Strings,
/// comments and template text are skipped; a `/` after an operator starts a regex literal.
/// Long because it is one byte-level scanner whose states (strings, comments, templates, regex
/// literals, operators) share one loop.
pub fn nesting_estimate(code: &str) -> usize {
    let b = code.as_bytes();
    let mut stack = Nest::default();
    let mut max = 0usize;
    let mut i = 0;
    // true when the previous significant token ends an operand (then `/` divides)
    let mut after_operand = false;
    let mut templates: Vec<usize> = Vec::new(); // stack depth at each `${`
    let mut headers: Vec<usize> = Vec::new(); // stack depth inside each control header `(`
    let mut pending_header = false;
    while i < b.len() {
        if max > MAX_NESTING {
            return max;
        }
        let c = b[i];
        match c {
            b'\n' => {
                // A line ending with a complete operand ends the statement (no semicolons),
                // unless the next line goes on with an operator (`a\n= b\n= c`).
                if after_operand && !continues(b, i + 1) {
                    stack.reset();
                }
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                i += 1;
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
                continue;
            }
            b'"' | b'\'' => {
                i = skip_quoted(b, i, c);
                after_operand = true;
                continue;
            }
            b'`' => {
                i = skip_template_text(b, i + 1);
                if i < b.len() && b[i] == b'$' {
                    // `${`: an expression inside the template
                    i += 2;
                    stack.push();
                    templates.push(stack.len());
                    after_operand = false;
                } else {
                    i += 1;
                    after_operand = true;
                }
                max = max.max(stack.total());
                continue;
            }
            b'/' if !after_operand => {
                i = skip_regex(b, i + 1);
                after_operand = true;
                continue;
            }
            b'(' | b'[' | b'{' => {
                stack.push();
                if c == b'(' && pending_header {
                    headers.push(stack.len());
                }
                pending_header = false;
                after_operand = false;
            }
            b'}' if templates.last() == Some(&stack.len()) => {
                // end of `${ ... }`: back into template text
                templates.pop();
                if stack.len() > 1 {
                    stack.pop();
                }
                i = skip_template_text(b, i + 1);
                if i < b.len() && b[i] == b'$' {
                    i += 2;
                    stack.push();
                    templates.push(stack.len());
                    after_operand = false;
                } else {
                    i += 1;
                    after_operand = true;
                }
                continue;
            }
            b')' | b']' | b'}' => {
                // `)` closing `if (...)`, `for (...)`, `while (...)`: a statement follows.
                let header = c == b')' && headers.last() == Some(&stack.len());
                if header {
                    headers.pop();
                }
                if stack.len() > 1 {
                    stack.pop();
                }
                after_operand = c != b'}' && !header;
            }
            b';' | b',' => {
                stack.reset();
                after_operand = false;
            }
            b'!' | b'~' | b'+' | b'-' | b'?' | b'=' | b':' | b'*' | b'&' | b'|' | b'<' | b'>'
            | b'%' | b'^' | b'.' | b'@' | b'#' => {
                stack.bump();
                after_operand = false;
            }
            _ if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 => {
                let start = i;
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric()
                        || b[i] == b'_'
                        || b[i] == b'$'
                        || b[i] >= 0x80)
                {
                    i += 1;
                }
                let word = &code[start..i];
                let keyword = matches!(
                    word,
                    "new"
                        | "typeof"
                        | "void"
                        | "delete"
                        | "await"
                        | "yield"
                        | "if"
                        | "else"
                        | "for"
                        | "while"
                        | "do"
                        | "with"
                        | "return"
                        | "throw"
                        | "case"
                        | "in"
                        | "of"
                        | "instanceof"
                        | "async"
                        | "function"
                        | "class"
                        | "extends"
                        | "let"
                        | "const"
                        | "var"
                        | "try"
                        | "catch"
                        | "finally"
                        | "switch"
                );
                if keyword {
                    stack.bump();
                }
                after_operand = !keyword || matches!(word, "this" | "super");
                pending_header = matches!(word, "if" | "for" | "while" | "with" | "catch");
                max = max.max(stack.total());
                continue;
            }
            _ => {}
        }
        max = max.max(stack.total());
        i += 1;
    }
    max
}

/// Bracket levels, each with its count of unclosed operators; the total is kept up to date.
struct Nest {
    levels: Vec<usize>,
    sum: usize,
}

impl Default for Nest {
    fn default() -> Nest {
        Nest {
            levels: vec![0],
            sum: 0,
        }
    }
}

impl Nest {
    fn push(&mut self) {
        self.levels.push(0);
    }
    fn pop(&mut self) {
        if let Some(v) = self.levels.pop() {
            self.sum -= v;
        }
    }
    fn bump(&mut self) {
        if let Some(top) = self.levels.last_mut() {
            *top += 1;
            self.sum += 1;
        }
    }
    fn reset(&mut self) {
        if let Some(top) = self.levels.last_mut() {
            self.sum -= *top;
            *top = 0;
        }
    }
    fn len(&self) -> usize {
        self.levels.len()
    }
    fn total(&self) -> usize {
        self.levels.len() + self.sum
    }
}

/// Whether the next significant character (after `i`) continues an expression.
fn continues(b: &[u8], mut i: usize) -> bool {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | b'\n') {
        i += 1;
    }
    match b.get(i) {
        None => false,
        // `//` and `/*` start comments; a lone `/` divides
        Some(b'/') => !matches!(b.get(i + 1), Some(b'/') | Some(b'*')),
        Some(c) => matches!(
            c,
            b'=' | b'+'
                | b'-'
                | b'*'
                | b'%'
                | b'&'
                | b'|'
                | b'^'
                | b'<'
                | b'>'
                | b'?'
                | b':'
                | b'.'
                | b'!'
                | b'~'
                | b','
        ),
    }
}

fn skip_quoted(b: &[u8], mut i: usize, q: u8) -> usize {
    i += 1;
    while i < b.len() && b[i] != q && b[i] != b'\n' {
        if b[i] == b'\\' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// From inside a template, stops at the closing backtick or at a `${` (index of `$`).
fn skip_template_text(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'`' => return i,
            b'$' if b.get(i + 1) == Some(&b'{') => return i,
            _ => i += 1,
        }
    }
    i
}

fn skip_regex(b: &[u8], mut i: usize) -> usize {
    let mut class = false;
    while i < b.len() && b[i] != b'\n' {
        match b[i] {
            b'\\' => i += 1,
            b'[' => class = true,
            b']' => class = false,
            b'/' if !class => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_code_is_shallow_and_deep_code_is_refused() {
        let ordinary = "const a = users.filter(u => u.active).map(u => ({ n: u.name }));\nconst s = `x ${a.length} y`;\nif (a) { for (const x of a) { console.log(x?.y ?? 0); } }";
        assert!(
            nesting_estimate(ordinary) < 40,
            "{}",
            nesting_estimate(ordinary)
        );
        let no_semicolons = "const a = 1\nif (a) b()\nfor (const x of xs) f(x)\n".repeat(3000);
        assert!(
            nesting_estimate(&no_semicolons) < 10,
            "{}",
            nesting_estimate(&no_semicolons)
        );
        let fluent =
            "const r = xs\n  .filter((x) => x)\n  .map((x) => x * 2)\n  .slice(0, 3)\n".repeat(50);
        assert!(
            nesting_estimate(&fluent) < 20,
            "{}",
            nesting_estimate(&fluent)
        );
        for deep in [
            "(".repeat(5000),
            "!\n".repeat(5000) + "x",
            "a\n= ".repeat(5000) + "1",
            "a\n+ ".repeat(5000) + "1",
            "if (a)\n".repeat(5000) + "x",
            "while (a)\n".repeat(5000) + "x",
            "a".to_string() + &".b".repeat(5000),
            "a\n.b".repeat(5000),
            "label: ".repeat(5000) + "x",
            "!".repeat(5000) + "x",
            "a = ".repeat(5000) + "1",
            "x ? y : ".repeat(5000) + "z",
            "-".repeat(5000) + "1",
            "await ".repeat(5000) + "x",
            "x => ".repeat(5000) + "1",
            "`${".repeat(5000),
            "/)/, ".repeat(50) + &"(".repeat(5000),
        ] {
            let alloc = Allocator::default();
            let e = parse(&alloc, &deep, Lang::Js).unwrap_err();
            assert!(e.contains("nested too deeply"), "{e}");
        }
    }

    #[test]
    fn typescript_needs_ts_and_syntax_errors_are_reported() {
        let alloc = Allocator::default();
        assert!(parse(&alloc, "const x: number = 1; return x;", Lang::Ts).is_ok());
        let alloc = Allocator::default();
        assert!(parse(&alloc, "const x: number = 1;", Lang::Js).is_err());
        let alloc = Allocator::default();
        let e = parse(&alloc, "const = ;", Lang::Js).unwrap_err();
        assert!(e.starts_with("cannot parse the code as js"), "{e}");
        let alloc = Allocator::default();
        assert!(parse(&alloc, "const u = await mcp.db.query({});", Lang::Js).is_ok());
    }
}
