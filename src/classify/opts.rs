//! getopt-like parsing of a command's arguments: option clusters (`-rf`), attached and
//! separate values (`-n5`, `-n 5`, `--lines=5`), long-option abbreviations
//! (`--compress-prog` for `--compress-program`), single-dash long options (`-exec`), `--`.

use super::types::DYN;

/// One parsed option: its canonical name (`-i`, `--in-place`), the name as written and
/// its value if it took one.
#[derive(Debug, Clone)]
pub struct Opt {
    pub name: String,
    pub given: String,
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Parsed {
    pub opts: Vec<Opt>,
    pub operands: Vec<String>,
}

impl Parsed {
    pub fn has(&self, name: &str) -> bool {
        self.opts.iter().any(|o| opt_matches(o, name))
    }
    pub fn values(&self, name: &str) -> Vec<&str> {
        self.opts
            .iter()
            .filter(|o| opt_matches(o, name))
            .filter_map(|o| o.value.as_deref())
            .collect()
    }
}

/// Does a parsed option match a rule's option name? Long options also match when written
/// as an abbreviation (getopt accepts `--compress-prog` for `--compress-program`).
pub fn opt_matches(o: &Opt, rule: &str) -> bool {
    if o.name == rule {
        return true;
    }
    o.given.starts_with("--")
        && o.given.len() > 2
        && rule.starts_with("--")
        && rule.starts_with(o.given.as_str())
}

/// getopt-like parsing. `value_opts` take a value (attached or next word); `opt_value`
/// options take only an attached value; `whole` lists single-dash long options
/// (`-exec`, `-wrapper`, `-TT`). With `stop_at_operand`, the first operand ends options.
pub fn parse_opts(
    args: &[String],
    value_opts: &[String],
    opt_value: &[String],
    whole: &[&str],
    stop_at_operand: bool,
) -> Parsed {
    let mut p = Parsed::default();
    let mut i = 0;
    let longs: Vec<&String> = value_opts
        .iter()
        .chain(opt_value.iter())
        .filter(|o| o.starts_with("--"))
        .collect();
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            p.operands.extend(args[i..].iter().cloned());
            break;
        }
        if a.starts_with("--") && a.len() > 2 {
            let (given, val) = match a.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (a.clone(), None),
            };
            // resolve an abbreviation when unique among the options we know
            let name = if value_opts.contains(&given) || opt_value.contains(&given) {
                given.clone()
            } else {
                let cands: Vec<&&String> = longs
                    .iter()
                    .filter(|l| l.starts_with(given.as_str()))
                    .collect();
                if cands.len() == 1 {
                    cands[0].to_string()
                } else {
                    given.clone()
                }
            };
            let takes = value_opts.contains(&name);
            let value = if val.is_some() {
                val
            } else if takes && i < args.len() {
                i += 1;
                Some(args[i - 1].clone())
            } else {
                None
            };
            p.opts.push(Opt { name, given, value });
            continue;
        }
        if a.starts_with('-') && a.len() > 1 && !a.starts_with(DYN) {
            if whole.contains(&a.as_str()) || (a.len() > 2 && value_opts.iter().any(|v| v == a)) {
                let takes = value_opts.iter().any(|v| v == a);
                let value = if takes && i < args.len() {
                    i += 1;
                    Some(args[i - 1].clone())
                } else {
                    None
                };
                p.opts.push(Opt {
                    name: a.clone(),
                    given: a.clone(),
                    value,
                });
                continue;
            }
            let chars: Vec<char> = a.chars().skip(1).collect();
            let mut j = 0;
            while j < chars.len() {
                let name = format!("-{}", chars[j]);
                let rest: String = chars[j + 1..].iter().collect();
                if value_opts.contains(&name) {
                    let value = if !rest.is_empty() {
                        Some(rest)
                    } else if i < args.len() {
                        i += 1;
                        Some(args[i - 1].clone())
                    } else {
                        None
                    };
                    p.opts.push(Opt {
                        given: name.clone(),
                        name,
                        value,
                    });
                    break;
                }
                if opt_value.contains(&name) {
                    p.opts.push(Opt {
                        given: name.clone(),
                        name,
                        value: if rest.is_empty() { None } else { Some(rest) },
                    });
                    break;
                }
                p.opts.push(Opt {
                    given: name.clone(),
                    name,
                    value: None,
                });
                j += 1;
            }
            continue;
        }
        p.operands.push(a.clone());
        if stop_at_operand {
            p.operands.extend(args[i..].iter().cloned());
            break;
        }
    }
    p
}
