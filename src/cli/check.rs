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
    let code = crate::classify::cli::run_check(&command, args.json, Some(&workdir));
    if !args.json {
        print_hosts(config, &command, &workdir);
    }
    Ok(code)
}

/// Which hosts this command reached or wanted through the egress proxy, from its recorded runs
/// (nothing when the data dir has no security database yet).
fn print_hosts(config: &crate::config::Config, command: &str, workdir: &std::path::Path) {
    use crate::db::DbKind;
    if !DbKind::Security.path(&config.data_dir).exists() {
        return;
    }
    let wd = workdir
        .canonicalize()
        .unwrap_or_else(|_| workdir.to_path_buf());
    let report = crate::classify::check(command, &crate::classify::Context { workdir: Some(wd) });
    let Ok(sec) = crate::db::open_read_only(&config.data_dir, DbKind::Security) else {
        return;
    };
    match crate::egress::store::of_command(&sec, &report.command_hash) {
        Ok(v) if v.is_empty() => {}
        Ok(v) => {
            println!("network:  hosts reached or wanted through the egress proxy (recorded runs)");
            for h in v {
                println!(
                    "  {:<8} {}  {} connection(s), {} bytes",
                    h.outcome,
                    crate::shown::line(&h.host),
                    h.connections,
                    h.bytes
                );
            }
        }
        Err(e) => println!("network:  cannot read the recorded hosts: {e:#}"),
    }
}
