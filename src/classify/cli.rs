//! `brainloop check [--json] -- 'COMMAND'`: classification only, never runs anything.
//!
//! Exit codes: 0 = valid and not blocked (it may still need validation: see the report),
//! 1 = blocked by a dangerous pattern, 2 = refused (invalid: too long, NUL, empty, or not
//! parseable shell).

use std::path::Path;

use super::{check, render_text, Context};

/// Print the report (JSON or text) on stdout and return the exit code.
pub fn run_check(command: &str, json: bool, workdir: Option<&Path>) -> i32 {
    let ctx = Context {
        workdir: workdir.map(|p| p.canonicalize().unwrap_or_else(|_| p.to_path_buf())),
    };
    let report = check(command, &ctx);
    if json {
        match crate::shown::json(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                println!("{{\"valid\":false,\"error\":\"report serialisation failed: {e}\"}}");
                return 2;
            }
        }
    } else {
        // The command may be pasted from an agent's: shown escaped (`shown`).
        print!("{}", crate::shown::block(&render_text(&report)));
    }
    exit_code(&report)
}

/// The exit code for a report (see the module doc).
pub fn exit_code(r: &super::CheckReport) -> i32 {
    if !r.valid {
        2
    } else if r.blocked {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(run_check("ls -l", true, None), 0);
        assert_eq!(run_check("rm -rf /", false, None), 1);
        assert_eq!(run_check("echo (", true, Some(Path::new("/tmp"))), 2);
    }
}
