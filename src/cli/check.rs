//! `brainloop check [--json] [--workdir W] -- 'COMMAND'`: classification only (issue 4), never
//! runs anything. Exit codes: 0 valid and not blocked (it may still need validation), 1 blocked,
//! 2 refused (not valid shell, too long, NUL).

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Print the full report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Working directory the command would run in (part of its identity hash) [default: the workspace].
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// The command, as one argument after `--` (several are joined with spaces).
    #[arg(required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

pub fn run(config: &crate::config::Config, args: &CheckArgs) -> anyhow::Result<i32> {
    let command = args.command.join(" ");
    // The same default as execute_bash, so the printed hash is the registry's identity.
    let workdir = args
        .workdir
        .clone()
        .unwrap_or_else(|| config.workspace.clone());
    Ok(crate::classify::cli::run_check(
        &command,
        args.json,
        Some(&workdir),
    ))
}
