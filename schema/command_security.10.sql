-- command_security.db step 10 (issue 36, "applied changes can be audited"): an applied change
-- set keeps what the human (or the worker) saw and who decided, after its overlay is swept:
-- * diff          the change set's shown diff (capped as `show` shows it); NULL once the
--                 retention pass drops it (`retention.results_days` after the apply);
-- * validation_id the validation its approval answered (NULL when applied unasked);
-- * decided_by    who or what decided: the approval's `decided_by` (operator:…, reviewer:…),
--                 or `worker: …` for a change set applied unasked (learned signatures, promotion).
ALTER TABLE journal ADD COLUMN diff TEXT NULL;
ALTER TABLE journal ADD COLUMN validation_id TEXT NULL;
ALTER TABLE journal ADD COLUMN decided_by TEXT NULL;
