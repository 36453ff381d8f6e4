-- brainloop.input.db — written by producers (people, scripts, `brainloop enqueue`, `brainloop mcp`).
-- The worker only reads this file. Version: PRAGMA user_version = 1.

CREATE TABLE IF NOT EXISTS jobs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused
    action      TEXT NOT NULL,
    params      TEXT NOT NULL DEFAULT '{}',        -- JSON object
    client_id   TEXT NOT NULL DEFAULT 'local',
    priority    INTEGER NOT NULL DEFAULT 0,        -- higher runs first
    not_before  INTEGER NULL,                      -- unix ms; NULL = now
    created_at  INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))
);

CREATE TABLE IF NOT EXISTS schedules (
    name        TEXT PRIMARY KEY,
    cron        TEXT NOT NULL,
    action      TEXT NOT NULL,
    params      TEXT NOT NULL DEFAULT '{}',
    client_id   TEXT NOT NULL DEFAULT 'local',
    enabled     INTEGER NOT NULL DEFAULT 1
);
