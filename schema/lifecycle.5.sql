-- lifecycle.db step 5 (issue 19): audit rows on their way to metadata.db. Each is staged in the
-- transaction that records its job's transition (done, pending_validation, requeued) and
-- deleted once metadata.db holds it (`db::audit_outbox`): a locked or failing metadata.db
-- delays the audit trail, it never loses a row.
CREATE TABLE IF NOT EXISTS audit_outbox (
    key             TEXT PRIMARY KEY,  -- random 128-bit hex; metadata `audit_keys` remembers it
    timestamp       INTEGER NOT NULL,
    job_id          INTEGER NULL,
    client_id       TEXT NOT NULL,
    action          TEXT NULL,
    params_hash     TEXT NULL,
    status          TEXT NOT NULL,
    duration_ms     INTEGER NULL,
    permission_set  TEXT NULL
);
