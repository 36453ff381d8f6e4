-- command_security.db step 2 (issue 14, "effects over commands"): operation signatures learned
-- from approved change sets, the signatures behind each validation, and the journal of applied
-- change sets (what `brainloop undo` restores).

CREATE TABLE IF NOT EXISTS signatures (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    signature            TEXT NOT NULL UNIQUE,   -- e.g. `sed -i EXPR WS_PATH`, `git commit -m MSG`
    program              TEXT NULL,
    learnable            INTEGER NOT NULL DEFAULT 1,  -- 0: never learned (network, outside writes, dynamic, ...)
    why_not              TEXT NULL,
    approvals            INTEGER NOT NULL DEFAULT 0,  -- approved overlay change sets containing it
    denials              INTEGER NOT NULL DEFAULT 0,
    upfront_approvals    INTEGER NOT NULL DEFAULT 0,  -- approvals of commands asked up front (never count)
    auto_applied         INTEGER NOT NULL DEFAULT 0,
    user_override        TEXT NULL
                         CHECK (user_override IS NULL OR user_override IN ('always_allow','always_ask','never')),
    user_override_reason TEXT NULL,
    first_seen           INTEGER NOT NULL,
    last_seen            INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS job_signatures (
    job_id      INTEGER PRIMARY KEY,
    overlay     INTEGER NOT NULL,      -- 1: the human sees a change set; 0: asked up front
    signatures  TEXT NOT NULL,         -- JSON array of signature texts
    counted     INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS journal (
    job_id      INTEGER PRIMARY KEY,
    command     TEXT NOT NULL,
    workspace   TEXT NOT NULL,
    policy_used TEXT NOT NULL,
    summary     TEXT NOT NULL,
    entries     TEXT NOT NULL,         -- JSON: [{path, before, after, saved}]
    applied_at  INTEGER NOT NULL,
    undone_at   INTEGER NULL
);
