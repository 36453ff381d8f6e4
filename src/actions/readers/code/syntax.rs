//! `read_code` extraction from a real parse (issue 25): tree-sitter grammars for Rust, Go, Python,
//! JavaScript and TypeScript (TSX included). Owns what an item is in each language: functions and
//! methods with their signature (multi-line signatures collapsed to one line, the enclosing impl /
//! class / function named as `parent`, decorators and attributes listed), types, imports,
//! exports, tests, TODO/FIXME comments and comment lines. The file is hostile text: tree-sitter
//! recovers from any error (the count of ERROR / MISSING nodes is reported) and the walk stops
//! descending past [`MAX_DEPTH`] nesting levels instead of exhausting the stack.

use regex::Regex;
use serde_json::{json, Value};
use std::sync::LazyLock;
use tree_sitter::{Node, Parser};

/// Nesting levels the walk descends at most (deeper items are not listed; `depth_limited`).
pub const MAX_DEPTH: usize = 200;
/// Characters a signature keeps at most.
const MAX_SIGNATURE: usize = 400;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Rust,
    Go,
    Python,
    Js,
}

/// The grammar for a language (`tsx`: the file is .tsx/.jsx-flavoured TypeScript); None when
/// there is none (the caller falls back to line patterns).
fn grammar(lang: &str, tsx: bool) -> Option<(&'static str, tree_sitter::Language, Family)> {
    Some(match lang {
        "rust" => (
            "tree-sitter-rust",
            tree_sitter_rust::LANGUAGE.into(),
            Family::Rust,
        ),
        "go" => (
            "tree-sitter-go",
            tree_sitter_go::LANGUAGE.into(),
            Family::Go,
        ),
        "python" => (
            "tree-sitter-python",
            tree_sitter_python::LANGUAGE.into(),
            Family::Python,
        ),
        "javascript" => (
            "tree-sitter-javascript",
            tree_sitter_javascript::LANGUAGE.into(),
            Family::Js,
        ),
        "typescript" if tsx => (
            "tree-sitter-typescript (tsx)",
            tree_sitter_typescript::LANGUAGE_TSX.into(),
            Family::Js,
        ),
        "typescript" => (
            "tree-sitter-typescript",
            tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Family::Js,
        ),
        _ => return None,
    })
}

/// What encloses an item.
#[derive(Debug, Clone)]
enum Scope {
    /// impl block, trait, class: its items are methods.
    Type(String),
    /// A function: its functions are nested.
    Function(String),
}

struct Out<'a> {
    src: &'a str,
    fam: Family,
    functions: Vec<Value>,
    types: Vec<Value>,
    imports: Vec<Value>,
    exports: Vec<Value>,
    tests: Vec<Value>,
    /// (start byte, end byte, start row) of every comment, in document order.
    comments: Vec<(usize, usize, usize)>,
    errors: usize,
    depth_limited: bool,
    /// Python `__all__`, when the module declares it.
    python_all: Option<Vec<Value>>,
}

/// Extraction from a parse; None when `lang` has no grammar. Fields: parser, functions, types,
/// imports, exports, tests, todos, lines, parse_errors (+ depth_limited).
pub fn extract(lang: &str, tsx: bool, text: &str) -> Option<Result<Value, String>> {
    let (parser_name, language, fam) = grammar(lang, tsx)?;
    let mut parser = Parser::new();
    if let Err(e) = parser.set_language(&language) {
        return Some(Err(format!("{parser_name}: {e}")));
    }
    let Some(tree) = parser.parse(text, None) else {
        return Some(Err(format!("{parser_name}: the parse did not finish")));
    };
    let mut out = Out {
        src: text,
        fam,
        functions: vec![],
        types: vec![],
        imports: vec![],
        exports: vec![],
        tests: vec![],
        comments: vec![],
        errors: 0,
        depth_limited: false,
        python_all: None,
    };
    out.walk(tree.root_node(), &[], 0);
    let todos = out.todos();
    let lines = out.line_counts();
    let mut exports = std::mem::take(&mut out.exports);
    if let Some(all) = out.python_all.take() {
        exports = all;
    }
    let mut v = json!({
        "parser": parser_name,
        "functions": out.functions,
        "types": out.types,
        "imports": out.imports,
        "exports": exports,
        "tests": out.tests,
        "todos": todos,
        "lines": lines,
        "parse_errors": out.errors,
    });
    if out.depth_limited {
        v["depth_limited"] = json!(MAX_DEPTH);
    }
    Some(Ok(v))
}

/// One line of text with runs of whitespace collapsed, at most [`MAX_SIGNATURE`] characters.
fn one_line(s: &str) -> String {
    let mut out = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.chars().count() > MAX_SIGNATURE {
        out = out.chars().take(MAX_SIGNATURE).collect::<String>() + "…";
    }
    out
}

fn unquote(s: &str) -> String {
    s.trim().trim_matches(['"', '\'', '`']).to_string()
}

impl<'a> Out<'a> {
    fn text(&self, n: Node) -> &'a str {
        self.src.get(n.byte_range()).unwrap_or("")
    }

    fn field(&self, n: Node, name: &str) -> Option<String> {
        n.child_by_field_name(name)
            .map(|c| self.text(c).to_string())
    }

    fn walk(&mut self, node: Node, scope: &[Scope], depth: usize) {
        if depth > MAX_DEPTH {
            self.depth_limited = true;
            return;
        }
        if node.is_error() || node.is_missing() {
            self.errors += 1;
        }
        if node.kind().contains("comment") {
            self.comments.push((
                node.start_byte(),
                node.end_byte(),
                node.start_position().row,
            ));
            return;
        }
        let pushed = match self.fam {
            Family::Rust => self.rust(node, scope),
            Family::Go => self.go(node, scope),
            Family::Python => self.python(node, scope),
            Family::Js => self.js(node, scope),
        };
        let inner: Vec<Scope> = match pushed {
            Some(s) => scope.iter().cloned().chain([s]).collect(),
            None => scope.to_vec(),
        };
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            self.walk(child, &inner, depth + 1);
        }
    }

    /// The signature: the item's text up to its body (the whole item when it has none), ending
    /// at the declaration's last token — a comment between the declaration and the body (the
    /// line after a Python `def …:`) is not part of it.
    fn signature(&self, item: Node, body_of: Node) -> String {
        let end = match body_of.child_by_field_name("body") {
            Some(b) => {
                let mut cursor = body_of.walk();
                body_of
                    .children(&mut cursor)
                    .filter(|c| c.end_byte() <= b.start_byte() && !c.kind().contains("comment"))
                    .map(|c| c.end_byte())
                    .max()
                    .filter(|e| *e > item.start_byte())
                    .unwrap_or(b.start_byte())
            }
            None => item.end_byte(),
        };
        let s = self.src.get(item.start_byte()..end).unwrap_or("");
        one_line(s.trim_end().trim_end_matches([';', ':', '{']))
    }

    /// Records a function: its kind and parent come from the enclosing scope.
    fn function(
        &mut self,
        item: Node,
        body_of: Node,
        name: &str,
        scope: &[Scope],
        decorators: Vec<String>,
    ) {
        let (kind, parent) = match scope.last() {
            Some(Scope::Type(t)) => ("method", Some(t.clone())),
            Some(Scope::Function(f)) => ("nested", Some(f.clone())),
            None => ("function", None),
        };
        let mut v = json!({
            "name": name,
            "kind": kind,
            "line": body_of.start_position().row + 1,
            "end_line": item.end_position().row + 1,
            "signature": self.signature(body_of, body_of),
        });
        if item.id() != body_of.id() {
            // A wrapped item (a Python decorated definition, a JS arrow function assigned to a
            // name): the signature starts at the name.
            v["signature"] = json!(self.signature(item, body_of));
            v["line"] = json!(item.start_position().row + 1);
        }
        if let Some(p) = parent {
            v["parent"] = json!(p);
        }
        if !decorators.is_empty() {
            v["decorators"] = json!(decorators);
        }
        self.functions.push(v);
    }

    fn type_item(&mut self, n: Node, name: &str, kind: &str) {
        self.types.push(json!({
            "name": name,
            "kind": kind,
            "line": n.start_position().row + 1,
            "end_line": n.end_position().row + 1,
        }));
    }

    fn named(list: &mut Vec<Value>, name: &str, n: Node) {
        list.push(json!({"name": name, "line": n.start_position().row + 1}));
    }

    // ---- Rust -------------------------------------------------------------------------------

    /// The attributes written above an item (`#[test]`, `#[derive(..)]`), top to bottom.
    fn rust_attributes(&self, n: Node) -> Vec<String> {
        let mut v = vec![];
        let mut prev = n.prev_sibling();
        while let Some(p) = prev {
            match p.kind() {
                "attribute_item" => v.push(one_line(self.text(p))),
                "line_comment" | "block_comment" => {}
                _ => break,
            }
            prev = p.prev_sibling();
        }
        v.reverse();
        v
    }

    fn rust_is_pub(&self, n: Node) -> bool {
        let mut c = n.walk();
        let public = n
            .children(&mut c)
            .any(|ch| ch.kind() == "visibility_modifier" && self.text(ch) == "pub");
        public
    }

    fn rust(&mut self, n: Node, scope: &[Scope]) -> Option<Scope> {
        let top = scope.is_empty();
        match n.kind() {
            "function_item" | "function_signature_item" => {
                let name = self.field(n, "name")?;
                let attrs = self.rust_attributes(n);
                if attrs.iter().any(|a| is_rust_test_attr(a)) {
                    Self::named(&mut self.tests, &name, n);
                }
                if top && self.rust_is_pub(n) {
                    Self::named(&mut self.exports, &name, n);
                }
                self.function(n, n, &name, scope, attrs);
                Some(Scope::Function(name))
            }
            "struct_item" | "enum_item" | "union_item" | "type_item" | "trait_item" => {
                let name = self.field(n, "name")?;
                let kind = n.kind().trim_end_matches("_item");
                self.type_item(n, &name, kind);
                if top && self.rust_is_pub(n) {
                    Self::named(&mut self.exports, &name, n);
                }
                (kind == "trait").then_some(Scope::Type(name))
            }
            "impl_item" => {
                let ty = one_line(&self.field(n, "type")?);
                Some(Scope::Type(ty))
            }
            "const_item" | "static_item" | "mod_item" if top && self.rust_is_pub(n) => {
                let name = self.field(n, "name")?;
                Self::named(&mut self.exports, &name, n);
                None
            }
            "use_declaration" => {
                let arg = one_line(&self.field(n, "argument")?);
                Self::named(&mut self.imports, &arg, n);
                if top && self.rust_is_pub(n) {
                    Self::named(&mut self.exports, &arg, n);
                }
                None
            }
            "extern_crate_declaration" => {
                let name = self.field(n, "name")?;
                Self::named(&mut self.imports, &name, n);
                None
            }
            _ => None,
        }
    }

    // ---- Go ---------------------------------------------------------------------------------

    fn go(&mut self, n: Node, scope: &[Scope]) -> Option<Scope> {
        let exported = |s: &str| s.chars().next().is_some_and(char::is_uppercase);
        match n.kind() {
            "function_declaration" => {
                let name = self.field(n, "name")?;
                if is_go_test(&name) {
                    Self::named(&mut self.tests, &name, n);
                }
                if exported(&name) {
                    Self::named(&mut self.exports, &name, n);
                }
                self.function(n, n, &name, scope, vec![]);
                Some(Scope::Function(name))
            }
            "method_declaration" => {
                let name = self.field(n, "name")?;
                let receiver = self.field(n, "receiver").unwrap_or_default();
                let ty = go_receiver_type(&receiver);
                if exported(&name) && exported(&ty) {
                    Self::named(&mut self.exports, &format!("{ty}.{name}"), n);
                }
                self.function(n, n, &name, &[Scope::Type(ty)], vec![]);
                Some(Scope::Function(name))
            }
            "type_spec" | "type_alias" => {
                let name = self.field(n, "name")?;
                let kind = match n.child_by_field_name("type").map(|t| t.kind()) {
                    _ if n.kind() == "type_alias" => "alias",
                    Some("struct_type") => "struct",
                    Some("interface_type") => "interface",
                    Some("function_type") => "func",
                    _ => "type",
                };
                self.type_item(n, &name, kind);
                if exported(&name) {
                    Self::named(&mut self.exports, &name, n);
                }
                None
            }
            "const_spec" | "var_spec" if scope.is_empty() => {
                let mut c = n.walk();
                let names: Vec<Node> = n.children_by_field_name("name", &mut c).collect();
                for id in names {
                    let t = self.text(id).to_string();
                    if exported(&t) {
                        Self::named(&mut self.exports, &t, id);
                    }
                }
                None
            }
            "import_spec" => {
                let path = unquote(&self.field(n, "path")?);
                Self::named(&mut self.imports, &path, n);
                None
            }
            _ => None,
        }
    }

    // ---- Python -----------------------------------------------------------------------------

    fn python(&mut self, n: Node, scope: &[Scope]) -> Option<Scope> {
        let top = scope.is_empty();
        match n.kind() {
            "function_definition" | "class_definition" => {
                let name = self.field(n, "name")?;
                let (outer, decorators) = match n.parent() {
                    Some(p) if p.kind() == "decorated_definition" => {
                        let mut c = p.walk();
                        let d = p
                            .children(&mut c)
                            .filter(|x| x.kind() == "decorator")
                            .map(|x| one_line(self.text(x)))
                            .collect();
                        (p, d)
                    }
                    _ => (n, vec![]),
                };
                let in_test_class =
                    matches!(scope.last(), Some(Scope::Type(t)) if t.starts_with("Test"));
                if top && !name.starts_with('_') {
                    Self::named(&mut self.exports, &name, outer);
                }
                if n.kind() == "class_definition" {
                    let mut v = json!({"name": name, "kind": "class",
                        "line": outer.start_position().row + 1, "end_line": n.end_position().row + 1});
                    if !decorators.is_empty() {
                        v["decorators"] = json!(decorators);
                    }
                    self.types.push(v);
                    if name.starts_with("Test") {
                        Self::named(&mut self.tests, &name, n);
                    }
                    return Some(Scope::Type(name));
                }
                if name.starts_with("test") && (top || in_test_class) {
                    Self::named(&mut self.tests, &name, n);
                }
                self.function(n, n, &name, scope, decorators);
                Some(Scope::Function(name))
            }
            "import_statement" => {
                let mut c = n.walk();
                let names: Vec<Node> = n.children_by_field_name("name", &mut c).collect();
                for m in names {
                    let t = m
                        .child_by_field_name("name")
                        .map(|x| self.text(x))
                        .unwrap_or_else(|| self.text(m))
                        .to_string();
                    Self::named(&mut self.imports, &t, n);
                }
                None
            }
            "import_from_statement" => {
                let m = self.field(n, "module_name")?;
                Self::named(&mut self.imports, &m, n);
                None
            }
            "assignment" if top => {
                if self.field(n, "left").as_deref() == Some("__all__") {
                    let right = n.child_by_field_name("right")?;
                    let mut c = right.walk();
                    let names = right
                        .children(&mut c)
                        .filter(|x| x.kind() == "string")
                        .map(|x| json!({"name": unquote(self.text(x)), "line": x.start_position().row + 1}))
                        .collect();
                    self.python_all = Some(names);
                }
                None
            }
            // Statements inside a module-level block (if/try) stay top-level for `__all__`.
            _ => None,
        }
    }

    // ---- JavaScript / TypeScript ------------------------------------------------------------

    fn js_decorators(&self, n: Node) -> Vec<String> {
        let mut v = vec![];
        let mut prev = n.prev_sibling();
        while let Some(p) = prev {
            if p.kind() != "decorator" {
                break;
            }
            v.push(one_line(self.text(p)));
            prev = p.prev_sibling();
        }
        v.reverse();
        // `@D export class C` puts the decorator on the export statement.
        let holders = [
            n.parent().filter(|p| p.kind() == "export_statement"),
            Some(n),
        ];
        for h in holders.into_iter().flatten() {
            let mut c = h.walk();
            v.extend(
                h.children(&mut c)
                    .filter(|x| x.kind() == "decorator")
                    .map(|x| one_line(self.text(x))),
            );
        }
        v
    }

    fn js(&mut self, n: Node, scope: &[Scope]) -> Option<Scope> {
        match n.kind() {
            "function_declaration" | "generator_function_declaration" | "function_signature" => {
                let name = self.field(n, "name")?;
                self.function(n, n, &name, scope, vec![]);
                Some(Scope::Function(name))
            }
            "method_definition" | "abstract_method_signature" => {
                let name = self.field(n, "name")?;
                let decorators = self.js_decorators(n);
                self.function(n, n, &name, scope, decorators);
                Some(Scope::Function(name))
            }
            "variable_declarator" | "public_field_definition" | "field_definition" => {
                let value = n
                    .child_by_field_name("value")
                    .filter(|v| JS_FUNCTION_VALUES.contains(&v.kind()))?;
                let name = self
                    .field(n, "name")
                    .or_else(|| self.field(n, "property"))?;
                let decorators = self.js_decorators(n);
                // The signature runs from the name to the function's body.
                let sig_end = value
                    .child_by_field_name("body")
                    .map(|b| b.start_byte())
                    .unwrap_or(value.end_byte());
                let sig = one_line(
                    self.src
                        .get(n.start_byte()..sig_end)
                        .unwrap_or("")
                        .trim_end()
                        .trim_end_matches("=>")
                        .trim_end(),
                );
                self.function(n, value, &name, scope, decorators);
                if let Some(last) = self.functions.last_mut() {
                    last["signature"] = json!(sig);
                    last["line"] = json!(n.start_position().row + 1);
                }
                Some(Scope::Function(name))
            }
            "class_declaration" | "abstract_class_declaration" | "class" => {
                let name = self.field(n, "name")?;
                self.type_item(n, &name, "class");
                let decorators = self.js_decorators(n);
                if let (false, Some(last)) = (decorators.is_empty(), self.types.last_mut()) {
                    last["decorators"] = json!(decorators);
                }
                Some(Scope::Type(name))
            }
            "interface_declaration" | "type_alias_declaration" | "enum_declaration" => {
                let name = self.field(n, "name")?;
                let kind = match n.kind() {
                    "interface_declaration" => "interface",
                    "enum_declaration" => "enum",
                    _ => "type",
                };
                self.type_item(n, &name, kind);
                None
            }
            "import_statement" => {
                let src = unquote(&self.field(n, "source")?);
                Self::named(&mut self.imports, &src, n);
                None
            }
            "export_statement" => {
                self.js_export(n);
                None
            }
            "call_expression" => {
                self.js_call(n);
                None
            }
            _ => None,
        }
    }

    fn js_export(&mut self, n: Node) {
        if let Some(src) = self.field(n, "source") {
            Self::named(&mut self.imports, &unquote(&src), n);
        }
        let mut c = n.walk();
        let children: Vec<Node> = n.children(&mut c).collect();
        if children.iter().any(|x| x.kind() == "default") {
            Self::named(&mut self.exports, "default", n);
        }
        if let Some(decl) = n.child_by_field_name("declaration") {
            if let Some(name) = self.field(decl, "name") {
                Self::named(&mut self.exports, &name, n);
            }
            let mut c2 = decl.walk();
            let declarators: Vec<Node> = decl
                .children(&mut c2)
                .filter(|x| x.kind() == "variable_declarator")
                .collect();
            for d in declarators {
                if let Some(name) = self.field(d, "name") {
                    Self::named(&mut self.exports, &name, d);
                }
            }
        }
        for clause in children.iter().filter(|x| x.kind() == "export_clause") {
            let mut c3 = clause.walk();
            let specs: Vec<Node> = clause
                .children(&mut c3)
                .filter(|x| x.kind() == "export_specifier")
                .collect();
            for s in specs {
                if let Some(name) = self.field(s, "alias").or_else(|| self.field(s, "name")) {
                    Self::named(&mut self.exports, &unquote(&name), s);
                }
            }
        }
        if children.iter().any(|x| x.kind() == "*") && n.child_by_field_name("source").is_some() {
            Self::named(&mut self.exports, "*", n);
        }
    }

    /// `require("x")` is an import; `it("…")`, `test("…")`, `describe("…")` (and their
    /// `.only` / `.skip` / `.each` forms) are tests.
    fn js_call(&mut self, n: Node) {
        let Some(f) = n.child_by_field_name("function") else {
            return;
        };
        let callee = match f.kind() {
            "identifier" => self.text(f),
            "member_expression" => f
                .child_by_field_name("object")
                .map(|o| self.text(o))
                .unwrap_or(""),
            _ => return,
        };
        let first_arg = n
            .child_by_field_name("arguments")
            .and_then(|a| a.named_child(0));
        let Some(arg) = first_arg.filter(|a| a.kind() == "string" || a.kind() == "template_string")
        else {
            return;
        };
        let what = unquote(self.text(arg));
        match callee {
            "require" if f.kind() == "identifier" => Self::named(&mut self.imports, &what, n),
            "it" | "test" | "describe" => Self::named(&mut self.tests, &what, n),
            _ => {}
        }
    }

    // ---- comments and lines -----------------------------------------------------------------

    fn todos(&self) -> Vec<Value> {
        let mut v = vec![];
        for &(a, b, row) in &self.comments {
            let start_line = row + 1;
            for (i, line) in self.src.get(a..b).unwrap_or("").lines().enumerate() {
                if let Some(t) = todo_in(line) {
                    v.push(json!({"line": start_line + i, "tag": t.0, "text": t.1}));
                }
            }
        }
        v
    }

    /// total / blank / comment (the first visible character is inside a comment) / code.
    fn line_counts(&self) -> Value {
        let (mut total, mut blank, mut comment) = (0usize, 0usize, 0usize);
        let mut offset = 0usize;
        let mut ci = 0usize;
        for line in self.src.split_inclusive('\n') {
            total += 1;
            let lead = line.len() - line.trim_start().len();
            let first = offset + lead;
            offset += line.len();
            if line.trim().is_empty() {
                blank += 1;
                continue;
            }
            while ci < self.comments.len() && self.comments[ci].1 <= first {
                ci += 1;
            }
            if ci < self.comments.len() && self.comments[ci].0 <= first {
                comment += 1;
            }
        }
        json!({"total": total, "blank": blank, "comment": comment, "code": total - blank - comment})
    }
}

const JS_FUNCTION_VALUES: &[&str] = &[
    "arrow_function",
    "function_expression",
    "function",
    "generator_function",
];

fn is_rust_test_attr(a: &str) -> bool {
    static RX: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"^#\[\s*(?:[\w:]+::)?test\b").ok());
    RX.as_ref().is_some_and(|r| r.is_match(a))
}

fn is_go_test(name: &str) -> bool {
    ["Test", "Benchmark", "Fuzz", "Example"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// `(s *Server)` → `Server`; `(l List[T])` → `List`.
fn go_receiver_type(receiver: &str) -> String {
    let inner = receiver
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')');
    let ty = inner.split_whitespace().last().unwrap_or("");
    ty.trim_start_matches('*')
        .split('[')
        .next()
        .unwrap_or("")
        .to_string()
}

/// `(tag, text)` of a TODO / FIXME / XXX / HACK marker in a comment line.
pub fn todo_in(line: &str) -> Option<(String, String)> {
    static RX: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"\b(TODO|FIXME|XXX|HACK)\b[:)\s-]*(.*)").ok());
    let c = RX.as_ref()?.captures(line)?;
    let text = c.get(2).map(|m| m.as_str()).unwrap_or("");
    Some((
        c[1].to_string(),
        one_line(text.trim_end_matches("*/").trim()),
    ))
}
