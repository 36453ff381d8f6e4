-- metadata.db step 3 (issue 19): the keys of audit rows moved from lifecycle's `audit_outbox`,
-- inserted in the same transaction as the row, so a move repeated after a crash (the outbox
-- row not yet deleted) is skipped: every staged audit row lands exactly once.
CREATE TABLE IF NOT EXISTS audit_keys (
    key TEXT PRIMARY KEY
) WITHOUT ROWID;
