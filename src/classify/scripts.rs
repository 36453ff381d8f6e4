//! Analysis of the small languages that "pure" filters accept as an argument: sed scripts,
//! awk programs and jq filters. These are the GTFOBins escape hatches of otherwise pure
//! programs (`sed e`, `sed w FILE`, `s///e`, `awk 'BEGIN{system("sh")}'`, `print > FILE`,
//! `"cmd" | getline`). Each analyser is conservative: anything it cannot read makes the
//! script `unknown`, never pure.

/// What a script would do beyond transforming stdin to stdout.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ScriptEffects {
    /// Runs a command (sed `e`, awk `system()` or pipes).
    pub exec: bool,
    /// Files it writes.
    pub writes: Vec<String>,
    /// Files it reads.
    pub reads: Vec<String>,
    /// Reads the environment.
    pub env: bool,
    /// Talks to the network (gawk `/inet/...` special files).
    pub network: bool,
    /// Could not be understood.
    pub unknown: bool,
    /// Shell commands given as static text (`system("...")`, sed `e CMD`).
    pub commands: Vec<String>,
    /// Human-readable findings.
    pub notes: Vec<String>,
}

/// Analyse a sed script (GNU syntax).
/// Long because it is one pass of a sed-script parser over GNU's command letters, an arm each.
pub fn sed(script: &str) -> ScriptEffects {
    let mut fx = ScriptEffects::default();
    let c: Vec<char> = script.chars().collect();
    let mut i = 0;
    let n = c.len();
    let rest_of_line = |i: &mut usize| -> String {
        let start = *i;
        while *i < n && c[*i] != '\n' {
            *i += 1;
        }
        c[start..*i].iter().collect::<String>().trim().to_string()
    };
    while i < n {
        // separators and whitespace
        while i < n && (c[i].is_whitespace() || c[i] == ';') {
            i += 1;
        }
        if i >= n {
            break;
        }
        // addresses
        let mut guard = 0;
        loop {
            guard += 1;
            if guard > 4 || i >= n {
                break;
            }
            if c[i].is_ascii_digit() {
                while i < n && (c[i].is_ascii_digit() || c[i] == '~') {
                    i += 1;
                }
            } else if c[i] == '$' {
                i += 1;
            } else if c[i] == '/' || c[i] == '\\' {
                let delim = if c[i] == '\\' {
                    i += 1;
                    if i >= n {
                        fx.unknown = true;
                        return fx;
                    }
                    c[i]
                } else {
                    '/'
                };
                i += 1;
                if !skip_delimited(&c, &mut i, delim) {
                    fx.unknown = true;
                    return fx;
                }
                while i < n && (c[i] == 'I' || c[i] == 'M') {
                    i += 1;
                }
            } else if c[i] == '+' {
                i += 1;
                while i < n && c[i].is_ascii_digit() {
                    i += 1;
                }
            }
            while i < n && c[i] == ' ' {
                i += 1;
            }
            if i < n && c[i] == ',' {
                i += 1;
                while i < n && c[i] == ' ' {
                    i += 1;
                }
                continue;
            }
            break;
        }
        while i < n && (c[i] == '!' || c[i] == ' ') {
            i += 1;
        }
        if i >= n {
            break;
        }
        let cmd = c[i];
        i += 1;
        match cmd {
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x'
            | 'z' | 'F' => {}
            'l' | 'q' | 'Q' | 'L' => {
                while i < n && (c[i] == ' ' || c[i].is_ascii_digit()) {
                    i += 1;
                }
            }
            '#' | ':' | 'b' | 't' | 'T' | 'v' => {
                if cmd == '#' || cmd == ':' {
                    rest_of_line(&mut i);
                } else {
                    while i < n && c[i] != ';' && c[i] != '\n' && c[i] != '}' {
                        i += 1;
                    }
                }
            }
            'a' | 'i' | 'c' => {
                // text to the end of line, with backslash-newline continuations
                while i < n {
                    if c[i] == '\\' && i + 1 < n {
                        i += 2;
                        continue;
                    }
                    if c[i] == '\n' {
                        break;
                    }
                    i += 1;
                }
            }
            'r' | 'R' => {
                let f = rest_of_line(&mut i);
                fx.notes.push(format!("sed `{cmd}` reads {f}"));
                fx.reads.push(f);
            }
            'w' | 'W' => {
                let f = rest_of_line(&mut i);
                fx.notes.push(format!("sed `{cmd}` writes {f} (GTFOBins)"));
                fx.writes.push(f);
            }
            'e' => {
                let cmd = rest_of_line(&mut i);
                if !cmd.is_empty() {
                    fx.commands.push(cmd);
                }
                fx.exec = true;
                fx.notes.push("sed `e` runs a command (GTFOBins)".into());
            }
            's' | 'y' => {
                if i >= n || c[i] == '\n' || c[i] == '\\' {
                    fx.unknown = true;
                    return fx;
                }
                let delim = c[i];
                i += 1;
                if !skip_delimited(&c, &mut i, delim) || !skip_delimited(&c, &mut i, delim) {
                    fx.unknown = true;
                    return fx;
                }
                if cmd == 's' {
                    while i < n {
                        let f = c[i];
                        match f {
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9' => i += 1,
                            'e' => {
                                fx.exec = true;
                                fx.notes.push(
                                    "sed s///e runs the pattern space as a command (GTFOBins)"
                                        .into(),
                                );
                                i += 1;
                            }
                            'w' => {
                                i += 1;
                                let file = rest_of_line(&mut i);
                                fx.notes.push(format!("sed s///w writes {file} (GTFOBins)"));
                                fx.writes.push(file);
                            }
                            _ => break,
                        }
                    }
                }
            }
            _ => {
                fx.unknown = true;
                fx.notes.push(format!("sed command `{cmd}` not understood"));
                return fx;
            }
        }
    }
    fx
}

/// Skip to after the next unescaped `delim`; false when there is none.
fn skip_delimited(c: &[char], i: &mut usize, delim: char) -> bool {
    while *i < c.len() {
        if c[*i] == '\\' {
            *i += 2;
            continue;
        }
        if c[*i] == delim {
            *i += 1;
            return true;
        }
        if c[*i] == '\n' && delim != '\n' {
            // GNU sed allows newlines inside s/// replacement only when escaped
            return false;
        }
        *i += 1;
    }
    false
}

/// Analyse an awk program.
pub fn awk(prog: &str) -> ScriptEffects {
    let mut fx = ScriptEffects::default();
    let c: Vec<char> = prog.chars().collect();
    let n = c.len();
    let mut i = 0;
    let mut prev_sig = '\n'; // previous significant char, for regex-vs-division
    let mut prev_word = String::new();
    let mut in_print = false;
    let mut paren = 0i32;
    while i < n {
        let ch = c[i];
        if ch == '"' {
            let start = i + 1;
            i += 1;
            while i < n && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            let s: String = c[start.min(n)..i.min(n)].iter().collect();
            if s.starts_with("/inet") {
                fx.network = true;
                fx.notes
                    .push("awk uses a /inet network special file".into());
            }
            i += 1;
            prev_sig = '"';
            prev_word.clear();
            continue;
        }
        if ch == '#' {
            while i < n && c[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if ch == '/'
            && (matches!(
                prev_sig,
                '\n' | '(' | ',' | '{' | ';' | '!' | '~' | '&' | '|' | '=' | '?' | ':'
            ) || matches!(prev_word.as_str(), "print" | "printf" | "return" | "in"))
        {
            i += 1;
            while i < n && c[i] != '/' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            prev_sig = '/';
            prev_word.clear();
            continue;
        }
        if ch.is_ascii_alphabetic() || ch == '_' || ch == '@' {
            let start = i;
            while i < n && (c[i].is_ascii_alphanumeric() || c[i] == '_' || c[i] == '@') {
                i += 1;
            }
            let w: String = c[start..i].iter().collect();
            match w.as_str() {
                "system" => {
                    // system("static command")
                    let mut j = i;
                    while j < n && c[j] == ' ' {
                        j += 1;
                    }
                    if j + 1 < n && c[j] == '(' {
                        let mut k = j + 1;
                        while k < n && c[k] == ' ' {
                            k += 1;
                        }
                        if k < n && c[k] == '"' {
                            let start = k + 1;
                            let mut e = start;
                            while e < n && c[e] != '"' {
                                if c[e] == '\\' {
                                    e += 1;
                                }
                                e += 1;
                            }
                            fx.commands.push(c[start.min(n)..e.min(n)].iter().collect());
                        }
                    }
                    fx.exec = true;
                    fx.notes
                        .push("awk system() runs a command (GTFOBins)".into());
                }
                "getline" => {
                    fx.reads.push("(getline)".into());
                    fx.notes
                        .push("awk getline reads a file or a command".into());
                }
                "ENVIRON" | "PROCINFO" => {
                    fx.env = true;
                    fx.notes.push(format!("awk reads {w}"));
                }
                "print" | "printf" => {
                    in_print = true;
                    paren = 0;
                }
                w if w.starts_with('@') => {
                    fx.unknown = true;
                    fx.notes.push(format!("awk directive {w} loads code"));
                }
                _ => {}
            }
            prev_word = w;
            prev_sig = 'a';
            continue;
        }
        match ch {
            '(' => paren += 1,
            ')' => paren -= 1,
            ';' | '}' | '\n' | '{' => in_print = false,
            '|' => {
                if i + 1 < n && c[i + 1] == '|' {
                    i += 2;
                    prev_sig = '|';
                    prev_word.clear();
                    continue;
                }
                fx.exec = true;
                fx.notes
                    .push("awk pipes to or from a command (GTFOBins)".into());
            }
            '>' if in_print && paren <= 0 => {
                fx.writes.push("(awk output redirection)".into());
                fx.notes
                    .push("awk print > FILE writes a file (GTFOBins)".into());
            }
            _ => {}
        }
        if !ch.is_whitespace() || ch == '\n' {
            prev_sig = ch;
            prev_word.clear();
        }
        i += 1;
    }
    fx
}

/// Analyse a jq filter: jq has no command execution; `$ENV`/`env` read the environment,
/// `input_filename` and `$__loc__` are harmless; `include "M";` and `import "M" as N;` read
/// modules (and `import … as $N` JSON data) from jq's search path (`~/.jq`, `$ORIGIN/../lib/jq`,
/// `-L` directories) or the path given: files read, so never pure (issue 48).
pub fn jq(filter: &str) -> ScriptEffects {
    let mut fx = ScriptEffects::default();
    for m in jq_modules(filter) {
        fx.notes
            .push(format!("jq loads the module {m:?} from its search path"));
        fx.reads.push(m);
    }
    if filter.contains("$ENV")
        || filter
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '$')
            .any(|w| w == "env")
    {
        fx.env = true;
        fx.notes.push("jq reads the environment".into());
    }
    fx
}

/// The module paths of a jq filter's `include` / `import` directives (a directive whose path
/// cannot be read as a string literal: `(a jq module)`).
fn jq_modules(filter: &str) -> Vec<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    let mut out = Vec::new();
    for word in ["include", "import"] {
        let mut from = 0;
        while let Some(i) = filter[from..].find(word).map(|i| i + from) {
            from = i + word.len();
            let before = filter[..i].chars().next_back();
            let after = filter[from..].chars().next();
            if before.is_some_and(ident) || after.is_some_and(ident) {
                continue;
            }
            let rest = filter[from..].trim_start();
            let path = rest
                .strip_prefix('"')
                .and_then(|r| r.find('"').map(|e| r[..e].to_string()))
                .filter(|p| !p.contains('\\'));
            out.push(path.unwrap_or_else(|| "(a jq module)".into()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jq_modules_are_reads() {
        assert!(jq(".a | map(.b)").reads.is_empty());
        assert!(jq(".name | contains(\"x\")").reads.is_empty());
        assert_eq!(jq("include \"lib\"; f").reads, vec!["lib"]);
        assert_eq!(jq("import \"/etc/x\" as $d; $d").reads, vec!["/etc/x"]);
        assert_eq!(jq("import\t\"m\" as m; m::f").reads, vec!["m"]);
        assert_eq!(jq("include (\"x\"); .").reads, vec!["(a jq module)"]);
        assert!(jq(".included").reads.is_empty());
        assert!(jq("$imported").reads.is_empty());
    }

    #[test]
    fn sed_scripts() {
        assert_eq!(sed("s/a/b/g"), ScriptEffects::default());
        assert!(sed("s/a/b/e").exec);
        assert!(sed("1e id").exec);
        assert_eq!(sed("s/x/y/w out.txt").writes, vec!["out.txt"]);
        assert_eq!(sed("w /etc/passwd").writes, vec!["/etc/passwd"]);
        assert!(!sed("/foo/d; 5q").exec);
        assert!(!sed("s|/usr|/opt|g;s,a,b,").exec);
        assert!(sed("s/a/b/;e").exec);
        assert!(sed("1!G;h;$!d").notes.is_empty());
    }

    #[test]
    fn awk_programs() {
        assert_eq!(awk("{print $1}"), ScriptEffects::default());
        assert!(!awk("/foo|bar/ {print}").exec);
        assert!(!awk("$3 > 100 {print $1}").exec);
        assert!(!awk("a || b {print}").exec);
        assert!(awk("BEGIN{system(\"sh\")}").exec);
        assert!(awk("{print | \"sh\"}").exec);
        assert!(!awk("{print $1 > \"out\"}").writes.is_empty());
        assert!(awk("BEGIN{while((\"id\" | getline l)>0) print l}").exec);
        assert!(awk("BEGIN{print ENVIRON[\"HOME\"]}").env);
        assert!(!awk("{ x = $1 / 2; print x }").exec);
    }
}
