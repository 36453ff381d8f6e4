-- brainloop.metadata.db — private to the worker: telemetry and the audit trail.
-- Version: PRAGMA user_version = 1.

CREATE TABLE IF NOT EXISTS events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    timestamp   INTEGER NOT NULL,
    kind        TEXT NOT NULL,     -- startup | shutdown | error | recovery | ...
    job_id      INTEGER NULL,
    detail      TEXT NULL          -- JSON
);
CREATE INDEX IF NOT EXISTS events_ts ON events(timestamp);

-- Every action call, refusals included.
CREATE TABLE IF NOT EXISTS audit (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    timestamp       INTEGER NOT NULL,
    job_id          INTEGER NULL,
    client_id       TEXT NOT NULL,
    action          TEXT NULL,
    params_hash     TEXT NULL,     -- SHA-256 hex of the params text
    status          TEXT NOT NULL,
    duration_ms     INTEGER NULL,
    permission_set  TEXT NULL
);
CREATE INDEX IF NOT EXISTS audit_ts ON audit(timestamp);
