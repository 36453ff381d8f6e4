//! `brainloop infer-permissions [--lang js|ts] [--mapping FILE] FILE|-`: prints the inference
//! report of a JS/TS file (or stdin) as JSON. Never executes the code. Exit 0 on success
//! (unparseable code is a report with an `error`, still 0), 2 when the input cannot be read.

use crate::config::Config;
use crate::infer::{self, Lang, McpPermissions};
use anyhow::Result;
use clap::Args;
use std::io::Read;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct InferArgs {
    /// Language: js or ts (default: from the file extension, else js)
    #[arg(long, value_name = "js|ts")]
    pub lang: Option<String>,
    /// MCP tool → permission set mapping merged over the shipped defaults
    /// [default: the `mcp_permissions` configuration key]
    #[arg(long, value_name = "FILE")]
    pub mapping: Option<PathBuf>,
    /// The file to analyse, or `-` for stdin
    #[arg(value_name = "FILE|-")]
    pub file: String,
}

pub fn run(config: &Config, args: &InferArgs) -> Result<i32> {
    let lang = match &args.lang {
        Some(l) => match Lang::parse(l) {
            Some(l) => l,
            None => {
                eprintln!("brainloop: --lang must be js or ts (got {l:?})");
                return Ok(2);
            }
        },
        None if args.file.ends_with(".ts") || args.file.ends_with(".mts") => Lang::Ts,
        None => Lang::Js,
    };
    let mut code = String::new();
    let read = if args.file == "-" {
        std::io::stdin().read_to_string(&mut code).map(|_| ())
    } else {
        std::fs::read_to_string(&args.file).map(|s| code = s)
    };
    if let Err(e) = read {
        eprintln!("brainloop: cannot read {}: {e}", args.file);
        return Ok(2);
    }
    let path = args
        .mapping
        .clone()
        .or_else(|| config.mcp_permissions.clone());
    let mapping = McpPermissions::load(path.as_deref())?;
    let report = infer::infer_isolated(code, lang, mapping)?;
    println!("{}", crate::shown::json(&report)?);
    Ok(0)
}
