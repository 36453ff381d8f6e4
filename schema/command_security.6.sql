-- Egress by host (issue 23): what each command run reached or wanted through its job's egress
-- proxy, the hosts a human approved for a command (per client), and the open host requests.
CREATE TABLE IF NOT EXISTS egress_connections (
    id          INTEGER PRIMARY KEY,
    job_id      INTEGER NOT NULL,
    client_id   TEXT NOT NULL,
    command_hash TEXT NOT NULL,
    host        TEXT NOT NULL,
    port        INTEGER NOT NULL,
    protocol    TEXT NOT NULL,
    outcome     TEXT NOT NULL CHECK (outcome IN ('allowed', 'refused', 'failed')),
    rule        TEXT,
    address     TEXT,
    reason      TEXT,
    bytes_up    INTEGER NOT NULL DEFAULT 0,
    bytes_down  INTEGER NOT NULL DEFAULT 0,
    at_ms       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS egress_connections_job ON egress_connections(job_id);
CREATE INDEX IF NOT EXISTS egress_connections_command ON egress_connections(command_hash);
CREATE INDEX IF NOT EXISTS egress_connections_at ON egress_connections(at_ms);

-- Written only by the operator CLI (`brainloop approve ID --host HOST:PORT`): human decisions.
CREATE TABLE IF NOT EXISTS egress_hosts (
    client_id     TEXT NOT NULL,
    command_hash  TEXT NOT NULL,
    rule          TEXT NOT NULL,
    validation_id TEXT,
    decided_by    TEXT NOT NULL,
    decided_at    INTEGER NOT NULL,
    PRIMARY KEY (client_id, command_hash, rule)
);

-- A job that was refused hosts and waits for a human (written by the worker).
CREATE TABLE IF NOT EXISTS egress_requests (
    validation_id TEXT PRIMARY KEY,
    job_id        INTEGER NOT NULL,
    client_id     TEXT NOT NULL,
    command_hash  TEXT NOT NULL,
    hosts         TEXT NOT NULL,
    created_at    INTEGER NOT NULL
);
