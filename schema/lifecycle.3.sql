-- brainloop.lifecycle.db step 3 (user_version 2 → 3): the LLM client and its actions (issue 9).

-- Tokens spent per UTC day, for the daily budget (survives restarts). Never holds the API key.
CREATE TABLE IF NOT EXISTS llm_usage (
    day                 TEXT PRIMARY KEY,   -- UTC date, YYYY-MM-DD
    prompt_tokens       INTEGER NOT NULL DEFAULT 0,
    completion_tokens   INTEGER NOT NULL DEFAULT 0,
    requests            INTEGER NOT NULL DEFAULT 0,
    updated_at          INTEGER NOT NULL
);

-- Generated content waiting for a human (generate_file's file, generate_sql's writing script).
-- On approval the job writes exactly this content: it is never generated again. `content_hash`
-- is the validation's command_hash: SHA-256 over the action, the target's real path and the
-- content; the resumed job recomputes it and writes nothing unless it matches.
CREATE TABLE IF NOT EXISTS llm_pending (
    job_id          INTEGER PRIMARY KEY,
    action          TEXT NOT NULL,
    target          TEXT NOT NULL,
    content         TEXT NOT NULL,
    content_hash    TEXT NOT NULL,
    created_at      INTEGER NOT NULL
);
