-- command_security.db step 8 (issue 35, "rules a human can read and check"):
-- * the approved examples a signature was learned from (`bash::explain`): the command of a
--   human-approved change set, where it ran, who approved it, and the paths it changed; kept
--   bounded per (client, signature), re-signed whenever the rules load;
-- * per (client, signature): the first human denial (when, which job and validation, by whom,
--   and how many approvals it had then: a denial of a learned signature retires it), and a
--   suspension when an approved example no longer signs as the signature (the rule no longer
--   says what the human approved).
CREATE TABLE IF NOT EXISTS signature_examples (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    client_id     TEXT NOT NULL,
    signature     TEXT NOT NULL,
    job_id        INTEGER NOT NULL,
    validation_id TEXT NULL,
    command       TEXT NOT NULL,
    workdir       TEXT NOT NULL,
    workspace     TEXT NOT NULL,
    paths         TEXT NOT NULL DEFAULT '[]',  -- JSON [[path, kind]] of the approved change set (bounded)
    decided_by    TEXT NOT NULL,
    decided_at    INTEGER NOT NULL,
    learn         INTEGER NOT NULL DEFAULT 0,  -- approved with --learn
    UNIQUE (client_id, signature, job_id)
);
CREATE INDEX IF NOT EXISTS signature_examples_sig ON signature_examples(signature, client_id);
ALTER TABLE signature_evidence ADD COLUMN denied_at INTEGER NULL;
ALTER TABLE signature_evidence ADD COLUMN denied_by TEXT NULL;
ALTER TABLE signature_evidence ADD COLUMN denied_job INTEGER NULL;
ALTER TABLE signature_evidence ADD COLUMN denied_validation TEXT NULL;
ALTER TABLE signature_evidence ADD COLUMN approvals_before_denial INTEGER NULL;
ALTER TABLE signature_evidence ADD COLUMN suspended TEXT NULL;
ALTER TABLE signature_evidence ADD COLUMN suspended_at INTEGER NULL;
