-- command_security.db step 3 (issue 18, "learning that cannot be gamed"): the evidence ledger.
-- Learning (promotion, signatures, duplicate-check evolution) counts only human decisions and
-- operator overrides, per client; what a promotion allows is the confinement the human saw.

CREATE TABLE IF NOT EXISTS evidence (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    client_id      TEXT NOT NULL,
    command_hash   TEXT NOT NULL,      -- the command's identity (text + workdir), not the effect hash
    job_id         INTEGER NOT NULL,
    source         TEXT NOT NULL
                   CHECK (source IN ('human_approved','human_denied','operator_override')),
    decided_by     TEXT NULL,
    mode           TEXT NOT NULL CHECK (mode IN ('overlay','direct')),  -- what the human saw
    permission_set TEXT NOT NULL,      -- the set the approved run was confined to
    success        INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    UNIQUE (job_id, command_hash, source)  -- a job counts once per command, however often it runs it
);
CREATE INDEX IF NOT EXISTS evidence_client_command ON evidence(client_id, command_hash, id);

CREATE TABLE IF NOT EXISTS promotions (
    client_id      TEXT NOT NULL,
    command_hash   TEXT NOT NULL,
    mode           TEXT NOT NULL CHECK (mode IN ('overlay','direct')),
    permission_set TEXT NOT NULL,
    reason         TEXT NOT NULL,
    promoted_at    INTEGER NOT NULL,
    withdrawn_at   INTEGER NULL,          -- demoted or denied: evidence before this no longer counts
    PRIMARY KEY (client_id, command_hash)
);

CREATE TABLE IF NOT EXISTS signature_evidence (
    client_id   TEXT NOT NULL,
    signature   TEXT NOT NULL,
    approvals   INTEGER NOT NULL DEFAULT 0,
    denials     INTEGER NOT NULL DEFAULT 0,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (client_id, signature)
);

ALTER TABLE job_signatures ADD COLUMN client_id TEXT NULL;
ALTER TABLE executions ADD COLUMN client_id TEXT NULL;
ALTER TABLE executions ADD COLUMN evidence INTEGER NOT NULL DEFAULT 0;

-- Promotions made before this step counted runs nobody approved: they are withdrawn, with a
-- history row saying why. Pure and sandboxed read-only commands (starting policy) are untouched.
INSERT INTO policy_history(command_hash, old_policy, new_policy, reason, changed_at)
SELECT command_hash, current_policy, 'ask',
       'promotion withdrawn: it counted runs no human approved (issue 18); promotions now count only human decisions, per client',
       CAST(strftime('%s','now') AS INTEGER) * 1000
FROM commands_registry WHERE promoted_at IS NOT NULL AND current_policy = 'auto_approve';
UPDATE commands_registry
   SET current_policy = 'ask',
       policy_reason = 'promotion withdrawn: it counted runs no human approved (issue 18)',
       promoted_at = NULL
 WHERE promoted_at IS NOT NULL AND current_policy = 'auto_approve';

-- Signature approvals counted before this step had no client: they teach nothing any more.
-- The totals stay for the record; learning starts again per client.
