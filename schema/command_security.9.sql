-- command_security.db step 9 (issue 36, job control): `brainloop cancel ID`. Only the
-- operator's CLI writes this file (DESIGN §2), so no producer or MCP client can cancel a job.
-- A row stays open (`consumed_at` NULL) until the job has a final result: the worker ends a
-- queued job without running it, stops a running one (its overlay discarded), ends a waiting
-- one; recovery and the claim end every job named here that has no final result yet, so a
-- cancelled job never runs again after a crash or restart.
CREATE TABLE IF NOT EXISTS cancellations (
    job_id        INTEGER PRIMARY KEY,
    requested_by  TEXT NOT NULL,
    reason        TEXT NULL,
    created_at    INTEGER NOT NULL,
    consumed_at   INTEGER NULL,
    -- the job's final status once it ended (`cancelled`, or what it finished with first)
    outcome       TEXT NULL
);
CREATE INDEX IF NOT EXISTS cancellations_open ON cancellations(job_id) WHERE consumed_at IS NULL;
