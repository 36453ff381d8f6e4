// throwaway: static scan of the corpus (not committed)
use brainloop::bash::signatures;
use brainloop::classify::{check, Context};
use std::collections::BTreeMap;
fn main() {
    let root = std::path::Path::new("benches/corpus");
    let ws = std::path::PathBuf::from("/tmp/ws");
    let mut counts: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for kind in ["python", "node", "rust", "go"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(kind))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files {
            for line in std::fs::read_to_string(&f).unwrap().lines().skip(1) {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                let cmd = v["cmd"].as_str().unwrap();
                let wd = ws.join(v["cwd"].as_str().unwrap_or(""));
                let r = check(
                    cmd,
                    &Context {
                        workdir: Some(wd.clone()),
                    },
                );
                let key = if r.blocked {
                    "BLOCKED".to_string()
                } else if r.starting_policy == "auto_approve" {
                    "auto".into()
                } else {
                    let sigs = signatures::of_report(&r, &wd, &ws);
                    let mut parts: Vec<String> = sigs
                        .iter()
                        .map(|s| {
                            if s.learnable {
                                s.text.clone()
                            } else {
                                format!("{} !{}", s.text, s.why_not.clone().unwrap_or_default())
                            }
                        })
                        .collect();
                    if sigs.is_empty() {
                        parts.push(format!("<{} no sig>", r.starting_policy));
                    }
                    format!("{} [{}] {}", kind, r.starting_policy, parts.join(" ; "))
                };
                let e = counts.entry(key).or_insert((0, cmd.to_string()));
                e.0 += 1;
            }
        }
    }
    for (k, (n, ex)) in &counts {
        println!("{n:4} {k}\n       e.g. {}", ex.lines().next().unwrap_or(""));
    }
}
