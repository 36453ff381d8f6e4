-- brainloop.input.db step 4 (user_version 3 → 4): MCP tasks and withdrawals (issue 55).
-- task_id: the MCP task handle of a job queued by `brainloop mcp` for a client that declared
--   the Tasks extension: `bl-<job id>-<64 random bits in hex>`, written in the job's own insert
--   transaction (so a task never exists before its job row is committed).
-- withdrawals: a client withdrawing its own job (`tasks/cancel`, or a producer's raw row). The
--   worker only reads it: a row is honoured when its client_id is the job's (the claimed
--   snapshot's), and becomes the worker's own cancellation (requested_by `client:NAME`) in
--   command_security.db.
ALTER TABLE jobs ADD COLUMN task_id TEXT NULL;
CREATE TABLE IF NOT EXISTS withdrawals (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id       INTEGER NOT NULL,
    client_id    TEXT NOT NULL,
    requested_at INTEGER NOT NULL
);
