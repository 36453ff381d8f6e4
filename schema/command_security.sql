-- command_security.db — written by the worker and the operator CLI only; never by an agent path.
-- Version: PRAGMA user_version = 1.

CREATE TABLE IF NOT EXISTS commands_registry (
    command_hash            TEXT PRIMARY KEY,   -- SHA-256 of command text + canonical workdir
    command_text            TEXT NOT NULL,
    workdir                 TEXT NULL,
    first_seen              INTEGER NOT NULL,
    last_executed           INTEGER NULL,
    execution_count         INTEGER NOT NULL DEFAULT 0,
    success_count           INTEGER NOT NULL DEFAULT 0,
    failure_count           INTEGER NOT NULL DEFAULT 0,
    avg_duration_ms         REAL NOT NULL DEFAULT 0,
    min_duration_ms         INTEGER NULL,
    max_duration_ms         INTEGER NULL,
    total_duration_ms       INTEGER NOT NULL DEFAULT 0,
    last_100_timestamps     TEXT NOT NULL DEFAULT '',
    current_policy          TEXT NOT NULL DEFAULT 'ask'
                            CHECK (current_policy IN ('auto_approve','ask','ask_warning')),
    policy_reason           TEXT NULL,
    promoted_at             INTEGER NULL,
    user_override           TEXT NULL
                            CHECK (user_override IS NULL OR user_override IN ('always_allow','always_ask','never')),
    user_override_reason    TEXT NULL,
    user_override_at        INTEGER NULL,
    risk_score              REAL NOT NULL DEFAULT 0.5,
    permission_set          TEXT NULL,
    classifier_version      TEXT NULL,
    duplicate_check_enabled INTEGER NOT NULL DEFAULT 1,
    duplicate_threshold_ms  INTEGER NOT NULL DEFAULT 2000,
    typical_exit_codes      TEXT NULL,
    common_errors           TEXT NULL
);

CREATE TABLE IF NOT EXISTS executions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    command_hash    TEXT NOT NULL,
    job_id          INTEGER NULL,
    exit_code       INTEGER NULL,
    duration_ms     INTEGER NULL,
    sandbox         TEXT NULL,
    executed_at     INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS executions_hash ON executions(command_hash, executed_at);
CREATE INDEX IF NOT EXISTS executions_ts ON executions(executed_at);

CREATE TABLE IF NOT EXISTS policy_history (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    command_hash    TEXT NOT NULL,
    old_policy      TEXT NULL,
    new_policy      TEXT NOT NULL,
    reason          TEXT NOT NULL,
    changed_at      INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS approvals (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    validation_id   TEXT NOT NULL,
    decision        TEXT NOT NULL
                    CHECK (decision IN ('approve','deny','always_allow','always_ask','never')),
    reason          TEXT NULL,
    decided_by      TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    consumed_at     INTEGER NULL
);
CREATE INDEX IF NOT EXISTS approvals_unconsumed ON approvals(validation_id) WHERE consumed_at IS NULL;

CREATE TABLE IF NOT EXISTS client_permissions (
    client_id       TEXT NOT NULL,
    permission      TEXT NOT NULL,   -- FILE_READ FILE_WRITE SYSTEM_COMMAND NETWORK LLM FORCE_EXECUTE SECRET (issue 38: pattern = a [secrets.NAME])
    pattern         TEXT NOT NULL,
    auto_approve    INTEGER NOT NULL DEFAULT 0,
    granted_by      TEXT NOT NULL,
    granted_at      INTEGER NOT NULL,
    PRIMARY KEY (client_id, permission, pattern)
);

CREATE TABLE IF NOT EXISTS permission_requests (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    client_id       TEXT NOT NULL,
    permission      TEXT NOT NULL,
    pattern         TEXT NOT NULL,
    justification   TEXT NULL,
    status          TEXT NOT NULL DEFAULT 'pending',  -- pending | granted | refused
    requested_at    INTEGER NOT NULL,
    decided_at      INTEGER NULL
);

CREATE VIEW IF NOT EXISTS command_stats AS
SELECT command_hash, command_text, execution_count, success_count, failure_count,
       CASE WHEN execution_count > 0
            THEN ROUND(CAST(success_count AS REAL) / execution_count * 100, 2) END AS success_rate,
       current_policy, user_override, risk_score, last_executed
FROM commands_registry;

CREATE VIEW IF NOT EXISTS high_risk_commands AS
SELECT command_hash, command_text, risk_score, execution_count, current_policy
FROM commands_registry WHERE risk_score >= 0.7;

CREATE VIEW IF NOT EXISTS promotion_candidates AS
SELECT command_hash, command_text, execution_count, success_count, risk_score
FROM commands_registry
WHERE current_policy = 'ask' AND user_override IS NULL AND execution_count >= 20
  AND CAST(success_count AS REAL) / execution_count >= 0.95 AND risk_score < 0.7;
