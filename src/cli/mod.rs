//! The command line (DESIGN §7): `init`, `run`, `enqueue`, `status`, `mcp`, ... Each subcommand lives in
//! its own module; this one parses arguments, sets up logging and maps errors to exit codes
//! (0 success, 1 error, 2 usage, 3 `status` / `enqueue --wait`: no worker running, 4 `status`:
//! alive but blocked; the codes of a job's status, for `result` and `enqueue --wait`, are
//! `result`'s: 1 not succeeded, 4 still queued or running, 5 waits for a human).

mod cancel;
mod check;
mod diagnose;
mod enqueue;
mod explain;
mod fleet;
mod grants;
mod history;
mod infer;
mod init;
mod jobs;
mod llm;
mod mcp;
mod programs;
mod protected;
mod prune;
mod registry;
mod repair;
mod result;
mod review;
mod reviewer;
mod rules;
mod run;
mod security;
mod status;

use crate::config::{Config, Overrides};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "brainloop",
    version,
    about = "A worker daemon that runs LLM work, shell commands and code safely, driven only by SQLite files.",
    long_about = "brainloop polls brainloop.input.db for jobs, runs each one and writes results, a heartbeat \
and metrics to brainloop.output.db. Producers insert rows (or use `brainloop enqueue`); operators watch \
`brainloop status`. All state lives in five SQLite files in the data dir.\n\n\
Configuration: embedded defaults < TOML file (--config / BRAINLOOP_CONFIG) < BRAINLOOP_* environment \
variables < flags. `brainloop run --print-config` shows the effective values."
)]
pub struct Cli {
    /// Data directory holding the five databases [env: BRAINLOOP_DATA_DIR] [default: ./brainloop-data]
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// TOML configuration file [env: BRAINLOOP_CONFIG]
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create or upgrade the five databases and set their file modes (safe to run any time).
    Init,
    /// Run the worker in the foreground (logs to stderr; stop with SIGTERM or Ctrl-C).
    Run(run::RunArgs),
    /// Insert a job into brainloop.input.db and print its id (`--wait`: its result JSON;
    /// exit 0 succeeded, 1 failed/denied/blocked/expired/cancelled/interrupted, 3 no worker,
    /// 4 --timeout, 5 waits for a human).
    Enqueue(enqueue::EnqueueArgs),
    /// List jobs, newest first: id, status, action, client, when, how long, the command or
    /// error (filters: --status, --action, --client, --since, --until; --limit; --json).
    Jobs(jobs::JobsArgs),
    /// Print a job's stored result JSON (exit 0 succeeded, 1 not: failed, denied, blocked,
    /// expired, cancelled, interrupted; 4 still queued or running; 5 waits for a human).
    Result(result::ResultArgs),
    /// Show the worker's health: heartbeat age and state, queue, file sizes, headline metrics.
    Status(status::StatusArgs),
    /// Delete old, already claimed jobs from input.db (the worker never writes it).
    PruneInput(prune::PruneArgs),
    /// Classify a shell command without running it: operations, layers, permission set, risk, blocks.
    Check(check::CheckArgs),
    /// List validations waiting for a human (commands that need approval).
    Validations(security::ValidationsArgs),
    /// Cancel a job (operator only): queued, it never runs; running, it is stopped and its
    /// overlay discarded; waiting for a human, its validation is closed. Ends `cancelled`.
    Cancel(cancel::CancelArgs),
    /// Approve a pending validation (`--always`: also always_allow this command).
    Approve(security::DecideArgs),
    /// Deny a pending validation (`--always`: also never allow this command).
    Deny(security::DenyArgs),
    /// The command registry: policy, override, runs, success rate, risk (`--history HASH`).
    Commands(security::CommandsArgs),
    /// Set a command's (or a signature's) override: always_allow, always_ask, never, or clear.
    Override(security::OverrideArgs),
    /// Show a validation or job: its change set (diff) and the command's output.
    Show(security::ShowArgs),
    /// The last decisions (approve, deny, expired) and applications (applied, undone), newest first.
    History(history::HistoryArgs),
    /// Restore what a job's applied change set replaced (refused if later changes conflict).
    Undo(security::UndoArgs),
    /// Rules shared through the fleet registry (a learned signature, an override, a host rule)
    /// by scope: the fleet, a project, one worker (`rules add`, `rules revoke`; the operator's role).
    Rules(rules::RulesArgs),
    /// Operation signatures: approvals, denials, learned or not (and why), per client; `--explain [SIG]` says what one matches.
    Signatures(security::SignaturesArgs),
    /// What a change set may never apply without a human, and why; with paths, the rule each matches.
    Protected(protected::ProtectedArgs),
    /// What brainloop knows about each program (`list`, `show NAME`) and from which file; `check
    /// FILE` validates an operator's entry (docs/programs.md).
    Programs(programs::ProgramsArgs),
    /// Review pending validations in one terminal screen: diff, output, approve / --learn / deny, undo.
    Review(review::ReviewArgs),
    /// The configured [reviewer] measured: `reviewer eval` replays the validations a human decided.
    Reviewer(reviewer::ReviewerArgs),
    /// Show what the command sandbox can enforce on this machine (Landlock, seccomp, namespaces, cgroup).
    Sandbox {
        #[arg(long)]
        json: bool,
    },
    /// (internal) The sandbox helper the worker runs for each command (the spec on stdin).
    #[command(hide = true)]
    SandboxExec,
    /// Give a client a permission (effective from its next job).
    Grant(grants::GrantArgs),
    /// Take back a permission given with `grant`.
    Revoke(grants::RevokeArgs),
    /// List clients' effective grants (config or default, plus operator grants).
    Grants(grants::GrantsArgs),
    /// List clients' permission requests; `requests grant ID` / `requests refuse ID` decide one.
    Requests(grants::RequestsArgs),
    /// Infer the permission set and pure-operation DAG of JS/TS agent code (never runs it).
    InferPermissions(infer::InferArgs),
    /// Accept a data-dir inconsistency the worker refuses to start with (a database recreated, replaced or rolled back).
    Repair(repair::RepairArgs),
    /// MCP server on stdio: a front-end that queues jobs for --client and returns their results.
    Mcp(mcp::McpArgs),
    /// The fleet registry (PostgreSQL, `[registry] url`): `migrate`, `status`, `add-role`.
    Registry(registry::RegistryArgs),
    /// The LLM API as the key sees it: `llm models` lists the models it can use.
    Llm(llm::LlmArgs),
}

/// Entry point of the binary; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    // The sandbox helper must stay single-threaded and quiet: nothing else runs before it.
    if let Command::SandboxExec = &cli.command {
        return crate::sandbox::exec::run_from_stdin();
    }
    if !matches!(cli.command, Command::Run(_) | Command::Mcp(_)) {
        // Short-lived CLI commands behave like Unix tools: `brainloop check ... | head` ends
        // quietly on a closed pipe instead of panicking. The daemon and the MCP server keep
        // SIGPIPE ignored (a client that goes away is an error to handle, not a signal).
        // SAFETY: called before any thread is started; restoring the default disposition.
        unsafe {
            let _ = nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGPIPE,
                nix::sys::signal::SigHandler::SigDfl,
            );
        }
    }
    let default_level = match cli.command {
        Command::Run(_) => "info",
        _ => "warn",
    };
    let flags = Overrides {
        data_dir: cli.data_dir.clone(),
        workspace: match &cli.command {
            Command::Run(r) => r.workspace.clone(),
            _ => None,
        },
        config: cli.config.clone(),
    };
    let mut config = match Config::load(&flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "brainloop: configuration error: {}",
                crate::shown::block(&format!("{e:#}"))
            );
            if matches!(cli.command, Command::Mcp(_)) {
                mcp::refused(e.context("configuration error"));
            }
            return 1;
        }
    };
    if let Err(e) = init_logging(default_level, &config) {
        eprintln!("brainloop: {e:#}");
        return 1;
    }
    // The program table, before anything classifies: an operator's entry that is refused
    // stops the process here, naming the file, the line and the rule.
    if !matches!(
        cli.command,
        Command::Programs(programs::ProgramsArgs {
            what: programs::What::Check { .. }
        })
    ) {
        if let Err(e) = programs::install(&config) {
            eprintln!("brainloop: {}", crate::shown::block(&format!("{e:#}")));
            if matches!(cli.command, Command::Mcp(_)) {
                mcp::refused(e);
            }
            return 1;
        }
    }
    // The workspace as the worker resolves it (`run` does it itself, creating the default):
    // `{workspace}` in a grant expands to an absolute path, as path grants must be.
    if !matches!(cli.command, Command::Run(_)) {
        if let Ok(ws) = run::absolute(&config.workspace) {
            config.workspace = ws;
        }
    }
    let res = match cli.command {
        Command::Init => init::run(&config),
        Command::Run(args) => run::run(config, &args),
        Command::Enqueue(args) => enqueue::run(&config, &args),
        Command::Jobs(args) => jobs::run(&config, &args),
        Command::Result(args) => result::run(&config, &args),
        Command::Status(args) => status::run(&config, &args),
        Command::PruneInput(args) => prune::run(&config, &args),
        Command::SandboxExec => Ok(crate::sandbox::SETUP_FAILED),
        Command::Sandbox { json } => sandbox_report(json, &config.sandbox.limits),
        Command::Check(args) => check::run(&config, &args),
        Command::Validations(args) => security::validations(&config, &args),
        Command::Cancel(args) => cancel::run(&config, &args),
        Command::Approve(args) => security::decide(&config, &args, true),
        Command::Deny(args) => security::decide(&config, &args.into(), false),
        Command::Commands(args) => security::commands(&config, &args),
        Command::Override(args) => security::set_override(&config, &args),
        Command::Show(args) => security::show(&config, &args),
        Command::History(args) => history::run(&config, &args),
        Command::Undo(args) => security::undo(&config, &args),
        Command::Signatures(args) => security::signatures_list(&config, &args),
        Command::Rules(args) => rules::run(&config, &args),
        Command::Protected(args) => protected::run(&config, &args),
        Command::Programs(args) => programs::run(&config, &args),
        Command::Review(args) => review::run(&config, &args),
        Command::Reviewer(args) => reviewer::run(&config, &args),
        Command::Grant(args) => grants::grant(&config, &args),
        Command::Revoke(args) => grants::revoke(&config, &args),
        Command::Grants(args) => grants::list(&config, &args),
        Command::Requests(args) => grants::requests(&config, &args),
        Command::InferPermissions(args) => infer::run(&config, &args),
        Command::Mcp(args) => mcp::run(config, &args),
        Command::Repair(args) => repair::run(&config, &args),
        Command::Registry(args) => registry::run(&config, &args),
        Command::Llm(args) => llm::run(&config, &args),
    };
    match res {
        Ok(code) => code,
        // Errors may quote agent or producer text (an id, a path, a refusal's reasons).
        Err(e) => {
            eprintln!("brainloop: {}", crate::shown::block(&format!("{e:#}")));
            1
        }
    }
}

/// Who an operator command is recorded as (`decided_by`, `granted_by`).
pub(crate) fn operator() -> String {
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| format!("uid {}", nix::unistd::getuid()));
    format!("operator:{user}")
}

fn sandbox_report(json: bool, limits: &crate::sandbox::Limits) -> anyhow::Result<i32> {
    let exe = std::env::current_exe()?;
    let level = crate::sandbox::detect::probe(&exe).with_limits(limits);
    if json {
        println!("{}", crate::shown::json(&level)?);
    } else {
        print!("{}", sandbox_table(&level));
    }
    Ok(if level.enforcing { 0 } else { 3 })
}

/// The guarantee table `brainloop sandbox` prints (issue 20).
pub(crate) fn sandbox_table(level: &crate::sandbox::detect::Level) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "sandbox: {}", level.label());
    let _ = writeln!(
        o,
        "  Landlock ABI {} (kernel {}{}), namespaces {}, seccomp {}",
        level.landlock_abi,
        level.landlock_kernel_abi,
        if level.landlock_abi_overridden {
            ", lowered by BRAINLOOP_TEST_LANDLOCK_ABI"
        } else {
            ""
        },
        if level.namespaces { "yes" } else { "no" },
        if level.seccomp { "yes" } else { "no" },
    );
    let _ = writeln!(o, "  limits: {}", level.limits);
    for s in &level.sets {
        let _ = writeln!(
            o,
            "\n{}: {}",
            s.set,
            match &s.refused_because {
                None => "runs confined".to_string(),
                Some(why) => format!("REFUSED ({why})"),
            }
        );
        let _ = writeln!(
            o,
            "  socket families: {}; socketpair always works",
            if s.socket_families.is_empty() {
                "none (every socket(2) refused with EPERM)".to_string()
            } else {
                format!(
                    "{} (any other refused with EPERM)",
                    s.socket_families.join(", ")
                )
            }
        );
        for g in &s.guarantees {
            let _ = writeln!(
                o,
                "  [{}] {:<60} {}",
                if g.holds { "x" } else { " " },
                g.guarantee,
                g.provided_by
            );
        }
    }
    let _ = writeln!(
        o,
        "\nan overlay run that reaches approved hosts also gets AF_INET, AF_INET6 (its egress forwarder)"
    );
    o
}

fn init_logging(default_level: &str, config: &Config) -> anyhow::Result<()> {
    use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriterExt};
    let filter = std::env::var("BRAINLOOP_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| default_level.to_string());
    let writer = match &config.log_file {
        Some(p) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| anyhow::anyhow!("cannot open log_file {}: {e}", p.display()))?;
            BoxMakeWriter::new(std::io::stderr.and(std::sync::Mutex::new(f)))
        }
        None => BoxMakeWriter::new(std::io::stderr),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(writer)
        .with_target(false);
    // Log lines quote clients, commands and errors: escaped by `shown` (fields and message in
    // the text format; every string in the JSON format).
    let _ = if config.log_format == "json" {
        builder
            .json()
            .with_current_span(true)
            .map_writer(crate::shown::JsonLog)
            .try_init()
    } else {
        builder
            .fmt_fields(crate::shown::log_fields())
            .with_ansi(
                config.log_file.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            )
            .try_init()
    };
    Ok(())
}
