-- brainloop.output.db — written by the worker, readable by anyone. Version: PRAGMA user_version = 1.

-- One row per job, updated in place.
-- Final: succeeded failed denied blocked duplicate_warning expired cancelled interrupted
-- Non-final: queued (claimed, waiting for a slot or for not_before), running, pending_validation
CREATE TABLE IF NOT EXISTS results (
    job_id      INTEGER PRIMARY KEY,
    action      TEXT,
    client_id   TEXT,
    status      TEXT NOT NULL,
    result      TEXT NULL,       -- JSON
    error       TEXT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    duration_ms INTEGER NULL,
    started_at  INTEGER NULL,
    finished_at INTEGER NULL
);
CREATE INDEX IF NOT EXISTS results_finished ON results(finished_at);

CREATE TABLE IF NOT EXISTS heartbeat (
    worker_id           TEXT NOT NULL,
    timestamp           INTEGER NOT NULL,
    status              TEXT NOT NULL,   -- starting | running | draining | stopped
    pid                 INTEGER NULL,
    version             TEXT NULL,
    sessions_active     INTEGER NOT NULL DEFAULT 0,
    sessions_completed  INTEGER NOT NULL DEFAULT 0,
    jobs_running        INTEGER NOT NULL DEFAULT 0,
    queue_depth         INTEGER NOT NULL DEFAULT 0,
    jobs_done_total     INTEGER NOT NULL DEFAULT 0,
    cache_hit_rate      REAL NOT NULL DEFAULT 0,
    sandbox_level       TEXT NULL,
    uptime_ms           INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS heartbeat_ts ON heartbeat(timestamp);

CREATE TABLE IF NOT EXISTS metrics (
    timestamp   INTEGER NOT NULL,
    name        TEXT NOT NULL,
    value       REAL NOT NULL,
    labels      TEXT NULL        -- JSON object
);
CREATE INDEX IF NOT EXISTS metrics_name_ts ON metrics(name, timestamp);
CREATE INDEX IF NOT EXISTS metrics_ts ON metrics(timestamp);

CREATE TABLE IF NOT EXISTS validations (
    id              TEXT PRIMARY KEY,   -- random 128-bit, hex
    job_id          INTEGER NOT NULL,
    client_id       TEXT NOT NULL,
    command         TEXT NULL,
    command_hash    TEXT NULL,
    policy          TEXT NULL,
    risk_score      REAL NULL,
    permission_set  TEXT NULL,
    reasons         TEXT NULL,          -- JSON array
    status          TEXT NOT NULL,      -- pending | approved | denied | expired
    requested_at    INTEGER NOT NULL,
    decided_at      INTEGER NULL,
    expires_at      INTEGER NULL
);
CREATE INDEX IF NOT EXISTS validations_status ON validations(status);
