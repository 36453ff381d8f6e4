//! Worker configuration: embedded defaults, overridden by an optional TOML file, then by
//! `BRAINLOOP_*` environment variables, then by command-line flags (highest wins).
//!
//! Every field has a documented default so `brainloop run` works with no config at all.
//! `brainloop run --print-config` shows the effective values.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Default data directory, relative to the current directory.
pub const DEFAULT_DATA_DIR: &str = "./brainloop-data";
/// Default workspace (where commands run); see DESIGN §5.10.
pub const DEFAULT_WORKSPACE: &str = "./workspace";
/// Upper bound of the drain window (with `cancel_grace_ms = 0`): the share of the 55 s shutdown
/// budget the later phases leave (`shutdown::DRAIN_AND_GRACE`). The check is on the sum:
/// `drain_window_ms + cancel_grace_ms <= MAX_DRAIN_WINDOW_MS`.
pub const MAX_DRAIN_WINDOW_MS: u64 = crate::shutdown::DRAIN_AND_GRACE.as_millis() as u64;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the five databases live (`BRAINLOOP_DATA_DIR`).
    pub data_dir: PathBuf,
    /// Where commands run by default (`BRAINLOOP_WORKSPACE`). The data dir must not lie inside it.
    pub workspace: PathBuf,
    /// Identity written in the heartbeat; default `brainloop@<hostname>`.
    pub worker_id: Option<String>,
    /// Heartbeat period (ms). Seed 001: 15 s.
    pub heartbeat_interval_ms: u64,
    /// A worker whose last heartbeat is older than this is reported dead by `status` (ms).
    pub dead_after_ms: u64,
    /// How many jobs run at once.
    pub concurrency: usize,
    /// Running slots one client (a job row's `client_id`) may hold at once, so that one client
    /// cannot occupy every slot (`BRAINLOOP_MAX_SLOTS_PER_CLIENT`). Between 1 and `concurrency`;
    /// unset: `concurrency - 1`, at least 1 — one slot stays free for the other clients, and with
    /// `concurrency = 1` the only slot goes to whichever job is next. See [`Config::slots_per_client`].
    pub max_slots_per_client: Option<usize>,
    /// Fallback check of input.db when no file-change notification arrives (ms). The check is a
    /// single `PRAGMA data_version`, so it costs nothing measurable.
    pub poll_fallback_ms: u64,
    /// Rows claimed per transaction when catching up with a backlog.
    pub claim_batch: usize,
    /// Bytes of row text (params, action, client) claimed per transaction at most (at least one
    /// row): with `claim_batch` rows of `params_max_bytes` each the worker would hold both
    /// multiplied; this bounds the claim's memory instead.
    pub claim_max_bytes: u64,
    /// A job whose run was cut off by a crash is retried until it has started this many times,
    /// then ends `interrupted`.
    pub max_attempts: u32,
    /// On SIGTERM, how long running jobs may take to finish before they are cancelled (ms),
    /// counted from the signal: the first share of the 55 s shutdown budget (`shutdown`), so
    /// time the worker spent finishing a call when the signal came is part of it.
    pub drain_window_ms: u64,
    /// After cancellation, how long a job may take to wind down before it is abandoned (ms).
    /// `drain_window_ms + cancel_grace_ms` is at most [`MAX_DRAIN_WINDOW_MS`] (45 s): the
    /// result flush, the recorder, the heartbeat and the exit keep the last 10 s of the budget.
    pub cancel_grace_ms: u64,
    /// Params larger than this fail the job without being loaded (bytes).
    pub params_max_bytes: u64,
    /// A HOROS registry database to register the worker in (seed 001); none by default.
    pub horos_registry: Option<PathBuf>,
    /// The project name in that registry.
    pub horos_name: String,
    /// `text` (default) or `json` (one JSON object per line, for journald or log shippers).
    pub log_format: String,
    /// Also append the log to this file.
    pub log_file: Option<PathBuf>,
    /// At start-up, run once each schedule firing missed while the worker was down.
    pub schedules_catch_up: bool,
    /// IANA time zone cron expressions are read in (`UTC`, `Europe/Paris`).
    pub schedules_timezone: String,
    /// A validation nobody answers within this time expires, and its job ends `expired` (ms).
    pub validation_ttl_ms: u64,
    /// An open `loop` block session untouched (no propose, refine or commit) for this long
    /// becomes `expired` and refuses every further mode (ms). Default 24 h.
    pub loop_session_ttl_ms: u64,
    /// Enables hidden actions used by the test-suite and benchmarks (`sleep`). Never in production.
    pub test_actions: bool,
    /// MCP tool → permission set mapping merged over the shipped `config/mcp-permissions.toml`
    /// (`BRAINLOOP_MCP_PERMISSIONS`); none: the shipped defaults.
    pub mcp_permissions: Option<PathBuf>,
    /// `[mcp]`: how `brainloop mcp` serves tasks (issue 55).
    pub mcp: McpConfig,
    pub retention: Retention,
    /// Clients and their grants (`[clients.NAME]`); `[clients.default]` replaces the minimal
    /// default of unlisted clients. See `clients::ClientConfig`.
    pub clients: std::collections::BTreeMap<String, crate::clients::ClientConfig>,
    /// Retry policies per action (`[retry.ACTION]`: max_attempts, backoff_ms, max_backoff_ms,
    /// jitter, on); a job's own `retry` column wins. None: a failed job is final at once. See
    /// `retry::Policy`.
    pub retry: std::collections::BTreeMap<String, crate::retry::Policy>,
    /// Runtime confinement of commands (`[sandbox]`): fail-closed switch, readable roots, limits.
    pub sandbox: crate::sandbox::SandboxConfig,
    /// The per-job egress proxy of network sets (`[egress]`): hosts file, timeouts.
    pub egress: crate::egress::EgressConfig,
    /// Credentials the egress proxy injects for the hosts they belong to (`[secrets.NAME]`,
    /// issue 38); a client uses one once granted (`brainloop grant CLIENT SECRET NAME`).
    pub secrets: crate::egress::secrets::Secrets,
    /// The Cerebras / OpenAI-compatible LLM client (`[llm]`); see `llm::LlmConfig`.
    pub llm: crate::llm::LlmConfig,
    /// Run commands whose writes stay in the workspace (no network) on a copy-on-write overlay
    /// and ask the human about the resulting change set instead of the command (DESIGN §5.12).
    pub overlay: bool,
    /// Approved change sets (with no denial) after which an operation signature is learned.
    pub signature_approvals: u32,
    /// Bytes one overlay run may write (its upper layer: files count for the larger of their
    /// size and their allocated blocks); over it the command is killed and the job fails with
    /// nothing kept (`BRAINLOOP_OVERLAY_MAX_BYTES`). Default 256 MiB.
    pub overlay_max_bytes: u64,
    /// Files, directories and links one overlay run may create or change
    /// (`BRAINLOOP_OVERLAY_MAX_INODES`). Default 20000.
    pub overlay_max_inodes: u64,
    /// The sum of a client's change sets waiting for a human (bytes); an overlay run of a client
    /// at or over it is refused until pending validations are answered, and a run's own cap is
    /// lowered to what is left (`BRAINLOOP_PENDING_MAX_BYTES_PER_CLIENT`). Default 1 GiB.
    pub pending_max_bytes_per_client: u64,
    /// Extra protected paths (globs relative to the workspace; `**/` matches at any depth), added
    /// to the built-in rules (the program entries, `src/programs/`) and the rules of `bash::protected`: a change
    /// set touching one is never applied without a human, whatever was learned.
    pub protected_paths: Vec<String>,
    /// Extra data paths (globs like `protected_paths`), added to the built-in table of caches and
    /// build output (`permset::DATA`): they lift only the default rule that protects every
    /// dot-file, never a listed rule or git's files (`bash::protected`).
    pub data_paths: Vec<String>,
    /// `[notify]`: a command told of each new validation and once more before it expires
    /// (`crate::hooks`: confined, the validation as JSON on stdin).
    pub notify: Option<crate::hooks::HookConfig>,
    /// `[reviewer]`: a command consulted before the human (`deny`, `ask`, `approve` — an approve
    /// only where a learned signature could apply the change set).
    pub reviewer: Option<crate::hooks::HookConfig>,
    /// `[registry]`: the fleet's PostgreSQL registry (issue 37, `docs/fleet.md`). Absent: the
    /// validations and decisions stay in this data dir's SQLite files, as on one machine.
    pub registry: Option<crate::registry::Settings>,
    /// `[programs]`: more directories of program entries (`dirs`), read after the `programs.d/`
    /// beside the configuration file (`crate::programs::operator`, docs/programs.md).
    pub programs: crate::programs::operator::Settings,
    /// The configuration file this was read from (none: the embedded defaults); its directory
    /// holds `programs.d/`.
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Retention {
    /// How often the pruning + checkpoint pass runs (ms).
    pub interval_ms: u64,
    pub heartbeat_days: u64,
    pub metrics_days: u64,
    /// Finished results (and their lifecycle snapshot) older than this are deleted.
    pub results_days: u64,
    pub events_days: u64,
    pub executions_days: u64,
    /// `PRAGMA journal_size_limit` for every database (bytes): bounds the WAL file after a checkpoint.
    pub journal_size_limit: i64,
}

/// `[mcp]`: the MCP front-end's task settings (issue 55, docs/mcp.md).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// The `pollIntervalMs` a task suggests to its client (ms). Default 2000.
    pub poll_interval_ms: u64,
    /// A blocking (non-task) call the client abandons (`notifications/cancelled`) also
    /// withdraws its job, instead of only stopping the wait. Default false.
    pub cancel_on_abandon: bool,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            poll_interval_ms: 2000,
            cancel_on_abandon: false,
        }
    }
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            interval_ms: 600_000,
            heartbeat_days: 7,
            metrics_days: 30,
            results_days: 30,
            events_days: 30,
            executions_days: 90,
            journal_size_limit: 64 * 1024 * 1024,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            workspace: PathBuf::from(DEFAULT_WORKSPACE),
            worker_id: None,
            heartbeat_interval_ms: 15_000,
            dead_after_ms: 30_000,
            concurrency: 4,
            max_slots_per_client: None,
            poll_fallback_ms: 2_000,
            claim_batch: 512,
            claim_max_bytes: 8 * 1024 * 1024,
            max_attempts: 3,
            drain_window_ms: 20_000,
            cancel_grace_ms: 5_000,
            params_max_bytes: 1024 * 1024,
            validation_ttl_ms: 4 * 3_600_000,
            loop_session_ttl_ms: 24 * 3_600_000,
            schedules_catch_up: true,
            schedules_timezone: "UTC".into(),
            horos_registry: None,
            horos_name: "brainloop".into(),
            log_format: "text".into(),
            log_file: None,
            test_actions: false,
            mcp_permissions: None,
            mcp: McpConfig::default(),
            retention: Retention::default(),
            clients: Default::default(),
            retry: Default::default(),
            sandbox: Default::default(),
            egress: Default::default(),
            secrets: Default::default(),
            llm: Default::default(),
            overlay: true,
            signature_approvals: 5,
            overlay_max_bytes: 256 * 1024 * 1024,
            overlay_max_inodes: 20_000,
            pending_max_bytes_per_client: 1024 * 1024 * 1024,
            protected_paths: Vec::new(),
            data_paths: Vec::new(),
            notify: None,
            reviewer: None,
            registry: None,
            programs: Default::default(),
            config_file: None,
        }
    }
}

/// Values given on the command line; `None` means "not given".
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub data_dir: Option<PathBuf>,
    pub workspace: Option<PathBuf>,
    pub config: Option<PathBuf>,
}

impl Config {
    /// The operator hooks' section (`[notify]`, `[reviewer]` and what running them needs).
    pub fn hooks(&self) -> crate::hooks::Settings {
        crate::hooks::Settings {
            notify: self.notify.clone(),
            reviewer: self.reviewer.clone(),
            data_dir: self.data_dir.clone(),
            workspace: self.workspace.clone(),
            sandbox: self.sandbox.clone(),
            egress: self.egress.clone(),
            llm: self.llm.clone(),
            paths: self.path_lists(),
        }
    }

    /// The operator's path lists (`protected_paths`, `data_paths`) for `bash::protected`.
    pub fn path_lists(&self) -> crate::permset::PathLists {
        crate::permset::PathLists {
            protected: self.protected_paths.clone(),
            data: self.data_paths.clone(),
        }
    }

    /// The HOROS registration section.
    pub fn horos(&self) -> crate::horos::Registration<'_> {
        crate::horos::Registration {
            registry: self.horos_registry.as_deref(),
            name: &self.horos_name,
            data_dir: &self.data_dir,
        }
    }

    /// The operator's program entries, in the order they are read: `programs.d/` beside the
    /// configuration file (when there is one and it exists), then `[programs] dirs`.
    pub fn program_places(&self) -> Result<Vec<PathBuf>> {
        let implicit = self
            .config_file
            .as_deref()
            .map(|f| f.parent().unwrap_or(Path::new(".")).join("programs.d"));
        crate::programs::operator::files(implicit.as_deref(), &self.programs.dirs)
    }

    /// Builds the effective configuration: defaults < file < environment < flags.
    pub fn load(flags: &Overrides) -> Result<Config> {
        let file = flags
            .config
            .clone()
            .or_else(|| std::env::var_os("BRAINLOOP_CONFIG").map(PathBuf::from));
        let mut cfg = match &file {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        cfg.config_file = file.clone();
        cfg.apply_env(|k| std::env::var(k).ok())?;
        if let Some(d) = &flags.data_dir {
            cfg.data_dir = d.clone();
        }
        if let Some(w) = &flags.workspace {
            cfg.workspace = w.clone();
        }
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        toml::from_str(&text).with_context(|| {
            format!(
                "config file {} is not valid (see docs/configuration.md for the keys)",
                path.display()
            )
        })
    }

    /// Applies `BRAINLOOP_<KEY>` variables. `get` is injectable for tests.
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<()> {
        fn num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T> {
            v.trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("{key}={v:?} is not a valid number"))
        }
        if let Some(v) = get("BRAINLOOP_DATA_DIR") {
            self.data_dir = PathBuf::from(v);
        }
        if let Some(v) = get("BRAINLOOP_WORKSPACE") {
            self.workspace = PathBuf::from(v);
        }
        if let Some(v) = get("BRAINLOOP_MCP_PERMISSIONS") {
            self.mcp_permissions = Some(PathBuf::from(v));
        }
        if let Some(v) = get("BRAINLOOP_WORKER_ID") {
            self.worker_id = Some(v);
        }
        if let Some(v) = get("BRAINLOOP_HOROS_REGISTRY") {
            self.horos_registry = Some(PathBuf::from(v));
        }
        if let Some(v) = get("BRAINLOOP_HOROS_NAME") {
            self.horos_name = v;
        }
        if let Some(v) = get("BRAINLOOP_SCHEDULES_TIMEZONE") {
            self.schedules_timezone = v;
        }
        if let Some(v) = get("BRAINLOOP_LOG_FORMAT") {
            self.log_format = v;
        }
        if let Some(v) = get("BRAINLOOP_LOG_FILE") {
            self.log_file = Some(PathBuf::from(v));
        }
        if let Some(v) = get("BRAINLOOP_REGISTRY_URL") {
            self.registry.get_or_insert_with(Default::default).url = v;
        }
        macro_rules! env_num {
            ($key:literal, $field:expr) => {
                if let Some(v) = get($key) {
                    $field = num($key, &v)?;
                }
            };
        }
        env_num!(
            "BRAINLOOP_HEARTBEAT_INTERVAL_MS",
            self.heartbeat_interval_ms
        );
        env_num!("BRAINLOOP_DEAD_AFTER_MS", self.dead_after_ms);
        env_num!("BRAINLOOP_CONCURRENCY", self.concurrency);
        if let Some(v) = get("BRAINLOOP_MAX_SLOTS_PER_CLIENT") {
            self.max_slots_per_client = Some(num("BRAINLOOP_MAX_SLOTS_PER_CLIENT", &v)?);
        }
        env_num!("BRAINLOOP_POLL_FALLBACK_MS", self.poll_fallback_ms);
        env_num!("BRAINLOOP_CLAIM_BATCH", self.claim_batch);
        env_num!("BRAINLOOP_CLAIM_MAX_BYTES", self.claim_max_bytes);
        env_num!("BRAINLOOP_MAX_ATTEMPTS", self.max_attempts);
        env_num!("BRAINLOOP_DRAIN_WINDOW_MS", self.drain_window_ms);
        env_num!("BRAINLOOP_CANCEL_GRACE_MS", self.cancel_grace_ms);
        env_num!("BRAINLOOP_PARAMS_MAX_BYTES", self.params_max_bytes);
        env_num!(
            "BRAINLOOP_RETENTION_INTERVAL_MS",
            self.retention.interval_ms
        );
        env_num!("BRAINLOOP_VALIDATION_TTL_MS", self.validation_ttl_ms);
        env_num!("BRAINLOOP_LOOP_SESSION_TTL_MS", self.loop_session_ttl_ms);
        self.llm.apply_env(&get)?;
        if let Some(v) = get("BRAINLOOP_OVERLAY") {
            self.overlay = matches!(v.trim(), "1" | "true" | "yes");
        }
        env_num!("BRAINLOOP_SIGNATURE_APPROVALS", self.signature_approvals);
        env_num!("BRAINLOOP_OVERLAY_MAX_BYTES", self.overlay_max_bytes);
        env_num!("BRAINLOOP_OVERLAY_MAX_INODES", self.overlay_max_inodes);
        env_num!(
            "BRAINLOOP_PENDING_MAX_BYTES_PER_CLIENT",
            self.pending_max_bytes_per_client
        );
        if let Some(v) = get("BRAINLOOP_TEST_ACTIONS") {
            self.test_actions = matches!(v.trim(), "1" | "true" | "yes");
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<()> {
        if let Some(h) = &self.notify {
            h.validate("notify")?;
        }
        if let Some(h) = &self.reviewer {
            h.validate("reviewer")?;
        }
        if let Some(r) = &self.registry {
            if r.url.is_empty() {
                bail!("[registry] needs url = \"postgres://ROLE@HOST/DB\" (remove the section for the local default)");
            }
        }
        if self.concurrency == 0 || self.concurrency > 1024 {
            bail!(
                "concurrency must be between 1 and 1024 (got {})",
                self.concurrency
            );
        }
        if let Some(n) = self.max_slots_per_client {
            if n == 0 || n > self.concurrency {
                bail!(
                    "max_slots_per_client must be between 1 and concurrency ({}) (got {n})",
                    self.concurrency
                );
            }
        }
        if self.heartbeat_interval_ms < 10 {
            bail!("heartbeat_interval_ms must be at least 10");
        }
        if self.poll_fallback_ms < 10 {
            bail!("poll_fallback_ms must be at least 10");
        }
        crate::schedules::cronexpr::parse_tz(&self.schedules_timezone)
            .map_err(|e| anyhow::anyhow!("schedules_timezone: {e}"))?;
        if !matches!(self.log_format.as_str(), "text" | "json") {
            bail!(
                "log_format must be \"text\" or \"json\" (got {:?})",
                self.log_format
            );
        }
        if self.loop_session_ttl_ms == 0 || self.loop_session_ttl_ms > i64::MAX as u64 / 2 {
            bail!("loop_session_ttl_ms must be at least 1 (ms) and reasonable");
        }
        if self.claim_batch == 0 {
            bail!("claim_batch must be at least 1");
        }
        if self.max_attempts == 0 {
            bail!("max_attempts must be at least 1");
        }
        for (name, s) in &self.secrets {
            crate::egress::secrets::validate(name, s).map_err(|e| anyhow::anyhow!(e))?;
        }
        for (action, p) in &self.retry {
            if let Err(e) = p.check() {
                bail!("[retry.{action}]: {e}");
            }
        }
        // One shutdown budget (`shutdown::BUDGET`, 55 s from the signal): the drain window and
        // the cancel grace take what the later phases (flush 4 s, recorder 3 s, heartbeat 2 s,
        // exit 1 s) leave.
        if self.drain_window_ms.saturating_add(self.cancel_grace_ms) > MAX_DRAIN_WINDOW_MS {
            bail!(
                "drain_window_ms ({}) + cancel_grace_ms ({}) is {} but must be at most {MAX_DRAIN_WINDOW_MS}: \
                 the whole shutdown has a budget of {} ms from SIGTERM, and the result flush, the \
                 recorder, the heartbeat and the exit keep the last {} ms of it. Lower one of them",
                self.drain_window_ms,
                self.cancel_grace_ms,
                self.drain_window_ms.saturating_add(self.cancel_grace_ms),
                crate::shutdown::BUDGET.as_millis(),
                crate::shutdown::LATER_PHASES.as_millis()
            );
        }
        if self.overlay_max_bytes == 0
            || self.overlay_max_inodes == 0
            || self.pending_max_bytes_per_client == 0
        {
            bail!("overlay_max_bytes, overlay_max_inodes and pending_max_bytes_per_client must be at least 1");
        }
        self.llm.validate()?;
        // the operator's path globs compile (the built-in rules are the program table's, which
        // is installed after the configuration loads)
        for (key, list) in [
            ("protected_paths", &self.protected_paths),
            ("data_paths", &self.data_paths),
        ] {
            crate::bash::run_on_use::globs(list.iter().map(String::as_str))
                .with_context(|| format!("{key}: not a valid path pattern"))?;
        }
        Ok(())
    }

    /// Running slots one client may hold: `max_slots_per_client`, else `concurrency - 1` (at
    /// least 1). Setting it to `concurrency` turns the per-client limit off.
    pub fn slots_per_client(&self) -> usize {
        self.max_slots_per_client
            .unwrap_or(self.concurrency.saturating_sub(1))
            .clamp(1, self.concurrency.max(1))
    }

    /// The worker id written in the heartbeat.
    pub fn worker_id(&self) -> String {
        self.worker_id.clone().unwrap_or_else(|| {
            let host = nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "localhost".into());
            format!("brainloop@{host}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_protected_path_is_refused() {
        let bad = Config {
            protected_paths: vec!["a/[".into()],
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        let bad = Config {
            data_paths: vec!["a/[".into()],
            ..Default::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn the_reviewers_escalation_defaults_to_three_and_is_bounded() {
        let c: Config = toml::from_str("[reviewer]\ncommand = \"true\"").unwrap();
        c.validate().unwrap();
        assert_eq!(c.reviewer.as_ref().unwrap().escalate_after_denials, 3);
        let never: Config =
            toml::from_str("[reviewer]\ncommand = \"true\"\nescalate_after_denials = 0").unwrap();
        never.validate().unwrap();
        let over: Config =
            toml::from_str("[reviewer]\ncommand = \"true\"\nescalate_after_denials = 101").unwrap();
        let e = over.validate().unwrap_err().to_string();
        assert!(
            e.contains("escalate_after_denials must be between 0 (never) and 100"),
            "{e}"
        );
    }

    #[test]
    fn defaults_are_valid_and_match_the_seed() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(c.heartbeat_interval_ms, 15_000);
        assert_eq!(c.params_max_bytes, 1 << 20);
        assert_eq!(c.data_dir, PathBuf::from("./brainloop-data"));
    }

    #[test]
    fn env_overrides_file_values() {
        let mut c: Config = toml::from_str("concurrency = 2\nheartbeat_interval_ms = 500").unwrap();
        assert_eq!(c.concurrency, 2);
        c.apply_env(|k| (k == "BRAINLOOP_CONCURRENCY").then(|| "7".to_string()))
            .unwrap();
        assert_eq!(c.concurrency, 7);
        assert_eq!(c.heartbeat_interval_ms, 500);
    }

    #[test]
    fn slots_per_client_default_leaves_one_slot_to_others_and_is_validated() {
        let with = |concurrency, max_slots_per_client| Config {
            concurrency,
            max_slots_per_client,
            ..Config::default()
        };
        assert_eq!(Config::default().slots_per_client(), 3);
        assert_eq!(with(1, None).slots_per_client(), 1);
        assert_eq!(with(2, None).slots_per_client(), 1);
        assert_eq!(with(8, None).slots_per_client(), 7);
        assert_eq!(with(4, Some(4)).slots_per_client(), 4);
        assert_eq!(with(4, Some(2)).slots_per_client(), 2);
        with(4, Some(4)).validate().unwrap();
        for bad in [0, 5] {
            let err = with(4, Some(bad)).validate().unwrap_err().to_string();
            assert!(err.contains("max_slots_per_client"), "{err}");
        }
        let mut c = Config::default();
        c.apply_env(|k| (k == "BRAINLOOP_MAX_SLOTS_PER_CLIENT").then(|| "2".to_string()))
            .unwrap();
        assert_eq!(c.slots_per_client(), 2);
        let c: Config = toml::from_str("concurrency = 6\nmax_slots_per_client = 6").unwrap();
        assert_eq!(c.slots_per_client(), 6);
    }

    #[test]
    fn bad_values_are_refused_with_the_key_named() {
        let mut c = Config::default();
        let err = c
            .apply_env(|k| (k == "BRAINLOOP_CONCURRENCY").then(|| "lots".to_string()))
            .unwrap_err();
        assert!(err.to_string().contains("BRAINLOOP_CONCURRENCY"), "{err}");
        let c = Config {
            drain_window_ms: 59_000,
            ..Config::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("drain_window_ms"));
        // The budget counts the cancel grace: 41 s + the default 5 s is over the 45 s share.
        let over = Config {
            drain_window_ms: 41_000,
            ..Config::default()
        };
        let err = over.validate().unwrap_err().to_string();
        assert!(
            err.contains("at most 45000") && err.contains("55000"),
            "{err}"
        );
        let at_max = Config {
            drain_window_ms: MAX_DRAIN_WINDOW_MS - 5_000,
            cancel_grace_ms: 5_000,
            ..Config::default()
        };
        at_max.validate().unwrap();
        assert!(toml::from_str::<Config>("concurency = 2").is_err());
    }
}
