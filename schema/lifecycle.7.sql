-- brainloop.lifecycle.db step 7 (user_version 6 → 7): the apply journal (issue 34).

-- One row per change set a job applies to this machine's workspace: `applying` is committed
-- (synchronous = FULL) before the first byte lands, `applied` after the last, with the outcome
-- the job ends with; `failed` when the apply was refused (conflict). Start-up recovery reads it:
-- an `applied` change set finishes its job with that outcome, an `applying` one is completed
-- (or reported), and neither is ever asked about again.
CREATE TABLE IF NOT EXISTS applies (
    job_id          INTEGER NOT NULL,
    effect_hash     TEXT NOT NULL,
    validation_id   TEXT,
    policy_used     TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('applying', 'applied', 'failed')),
    -- {status, result, error} of the job, once applied.
    outcome         TEXT,
    error           TEXT,
    started_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    PRIMARY KEY (job_id, effect_hash)
);
