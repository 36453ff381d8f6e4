-- command_security.db step 5 (issue 22, "learn in one answer"): who taught a client a signature
-- with `brainloop approve ID --learn`, when, and from which job. A learned row still needs no
-- denial of that client (a later denial withdraws it); `override SIGNATURE clear` deletes the rows.
ALTER TABLE signature_evidence ADD COLUMN learned_at INTEGER NULL;
ALTER TABLE signature_evidence ADD COLUMN learned_by TEXT NULL;
ALTER TABLE signature_evidence ADD COLUMN learned_job INTEGER NULL;
-- `approve --learn` (written by the operator CLI only, like every approvals row).
ALTER TABLE approvals ADD COLUMN learn INTEGER NOT NULL DEFAULT 0;
