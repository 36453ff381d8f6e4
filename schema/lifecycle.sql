-- brainloop.lifecycle.db — private to the worker. Version: PRAGMA user_version = 1.

-- The immutable snapshot of a job, taken when the worker first sees it (its claim).
-- Execution and approvals use only this row: editing jobs.params afterwards changes nothing.
CREATE TABLE IF NOT EXISTS queue (
    job_id          INTEGER PRIMARY KEY,
    action          TEXT,
    params          TEXT,            -- NULL when the row was rejected at claim (see reject_reason)
    client_id       TEXT NOT NULL DEFAULT 'local',
    priority        INTEGER NOT NULL DEFAULT 0,
    not_before      INTEGER NULL,
    created_at      INTEGER NULL,    -- jobs.created_at as the producer wrote it
    claimed_at      INTEGER NOT NULL,
    reject_reason   TEXT NULL,       -- a malformed row: the error it ends `failed` with
    command_hash    TEXT NULL,       -- filled by execute_bash (later issues)
    workdir         TEXT NULL,
    permission_set  TEXT NULL
);

-- One row per claimed job. status: claimed | running | pending_validation | done
CREATE TABLE IF NOT EXISTS processed_log (
    job_id      INTEGER PRIMARY KEY,
    status      TEXT NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    started_at  INTEGER NULL,
    finished_at INTEGER NULL
);
-- Recovery and dispatch only look at unfinished rows.
CREATE INDEX IF NOT EXISTS processed_log_open ON processed_log(status) WHERE status <> 'done';

-- Worker state: the claim high-water mark lives here (key 'high_water_mark').
CREATE TABLE IF NOT EXISTS config (
    key         TEXT PRIMARY KEY,
    value       TEXT NOT NULL,
    updated_at  INTEGER NOT NULL
);

-- Reader cache (path + size + nanosecond mtime), filled by the reader actions.
CREATE TABLE IF NOT EXISTS cache (
    cache_key   TEXT PRIMARY KEY,
    path        TEXT NOT NULL,
    size        INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    value       TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);

-- LLM loop sessions (block mode and agent mode).
CREATE TABLE IF NOT EXISTS sessions (
    session_id  TEXT PRIMARY KEY,
    job_id      INTEGER NULL,
    client_id   TEXT NOT NULL,
    mode        TEXT NOT NULL,
    status      TEXT NOT NULL,   -- open | committed | abandoned | expired
    state       TEXT NOT NULL,   -- JSON
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

-- Cron schedule state: last firing and whether one is running.
CREATE TABLE IF NOT EXISTS schedule_state (
    name            TEXT PRIMARY KEY,
    last_fired_at   INTEGER NULL,
    last_job_id     INTEGER NULL,
    running_job_id  INTEGER NULL
);
