//! `read_markdown` digest, from a real CommonMark parser (pulldown-cmark): title, headings as a
//! tree, sections with word counts, links and code blocks (with their line numbers).

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use serde_json::{json, Value};

fn level(l: HeadingLevel) -> u8 {
    match l {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

struct Heading {
    level: u8,
    text: String,
    line: usize,
    words: usize,
}

pub fn digest(text: &str) -> Value {
    let mut headings: Vec<Heading> = Vec::new();
    let mut links = Vec::new();
    let mut code_blocks = Vec::new();
    let mut preamble_words = 0usize;
    let mut total_words = 0usize;
    let mut in_heading: Option<(u8, usize, String)> = None;
    let mut in_link: Option<(String, String)> = None;
    let mut in_code: Option<(String, usize, String)> = None;
    let parser = Parser::new_ext(
        text,
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS,
    );
    for (ev, range) in parser.into_offset_iter() {
        match ev {
            Event::Start(Tag::Heading { level: l, .. }) => {
                in_heading = Some((level(l), line_of(text, range.start), String::new()));
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((level, line, t)) = in_heading.take() {
                    headings.push(Heading {
                        level,
                        text: t.trim().to_string(),
                        line,
                        words: 0,
                    });
                }
            }
            Event::Start(Tag::Link { dest_url, .. })
            | Event::Start(Tag::Image { dest_url, .. }) => {
                in_link = Some((dest_url.to_string(), String::new()));
            }
            Event::End(TagEnd::Link) | Event::End(TagEnd::Image) => {
                if let Some((url, t)) = in_link.take() {
                    links.push(
                        json!({"text": t.trim(), "url": url, "line": line_of(text, range.start)}),
                    );
                }
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                let lang = match kind {
                    pulldown_cmark::CodeBlockKind::Fenced(l) => {
                        l.split_whitespace().next().unwrap_or("").to_string()
                    }
                    pulldown_cmark::CodeBlockKind::Indented => String::new(),
                };
                in_code = Some((lang, line_of(text, range.start), String::new()));
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some((lang, line, body)) = in_code.take() {
                    code_blocks.push(json!({
                        "language": if lang.is_empty() { Value::Null } else { json!(lang) },
                        "line": line,
                        "lines": body.lines().count(),
                    }));
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, _, body)) = in_code.as_mut() {
                    body.push_str(&t);
                    continue;
                }
                if let Some((_, _, h)) = in_heading.as_mut() {
                    h.push_str(&t);
                }
                if let Some((_, l)) = in_link.as_mut() {
                    l.push_str(&t);
                }
                let w = t.split_whitespace().count();
                total_words += w;
                if in_heading.is_none() {
                    match headings.last_mut() {
                        Some(h) => h.words += w,
                        None => preamble_words += w,
                    }
                }
            }
            _ => {}
        }
    }
    let title = headings
        .iter()
        .find(|h| h.level == 1)
        .map(|h| h.text.clone());
    let sections: Vec<Value> = headings
        .iter()
        .map(|h| json!({"heading": h.text, "level": h.level, "line": h.line, "words": h.words}))
        .collect();
    json!({
        "title": title,
        "headings": tree(&headings),
        "sections": sections,
        "preamble_words": preamble_words,
        "words": total_words,
        "links": links,
        "code_blocks": code_blocks,
        "lines": text.lines().count(),
    })
}

/// Nests headings by level: each node has `children`.
fn tree(headings: &[Heading]) -> Value {
    fn build(hs: &[Heading], i: &mut usize, parent_level: u8) -> Vec<Value> {
        let mut out = Vec::new();
        while *i < hs.len() && hs[*i].level > parent_level {
            let h = &hs[*i];
            *i += 1;
            let children = build(hs, i, h.level);
            out.push(
                json!({"text": h.text, "level": h.level, "line": h.line, "children": children}),
            );
        }
        out
    }
    let mut i = 0;
    Value::Array(build(headings, &mut i, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_links_and_code_blocks() {
        let md = "intro words here\n\n# Title\n\nSome text with a [link](https://example.com).\n\n## Part A\n\n```rust\nfn main() {}\nlet x = 1;\n```\n\n### Deep\n\ntext\n\n## Part B\n\n![img](pic.png)\n";
        let d = digest(md);
        assert_eq!(d["title"], "Title");
        assert_eq!(d["preamble_words"], 3);
        let tree = d["headings"].as_array().unwrap();
        assert_eq!(tree.len(), 1);
        let parts = tree[0]["children"].as_array().unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0]["children"][0]["text"], "Deep");
        assert_eq!(d["links"][0]["url"], "https://example.com");
        assert_eq!(d["links"][0]["text"], "link");
        assert_eq!(d["links"][1]["url"], "pic.png");
        assert_eq!(d["code_blocks"][0]["language"], "rust");
        assert_eq!(d["code_blocks"][0]["lines"], 2);
        assert_eq!(d["code_blocks"][0]["line"], 9);
        assert_eq!(d["sections"].as_array().unwrap().len(), 4);
    }
}
