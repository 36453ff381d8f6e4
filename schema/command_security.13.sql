-- command_security.db step 13 (issue 50, "an apply that tells the truth"): the journal row of a
-- change set is written before the apply's first byte reaches the workspace, and says how far
-- the apply got:
-- * state          'applying' (written before the first byte; left so by a crash until start-up
--                  recovery completes or reports the apply), 'applied' (every path), 'partial'
--                  (the apply stopped on an error: only the paths of applied_paths are in the
--                  workspace; `brainloop undo` takes them back);
-- * applied_paths  for 'partial': the JSON array of the paths that landed (NULL otherwise).
ALTER TABLE journal ADD COLUMN state TEXT NOT NULL DEFAULT 'applied';
ALTER TABLE journal ADD COLUMN applied_paths TEXT NULL;

-- `brainloop signatures` reads each signature's per-client evidence by signature: the primary
-- key (client_id, signature) cannot serve that lookup, which made the listing quadratic.
CREATE INDEX IF NOT EXISTS signature_evidence_sig ON signature_evidence(signature, client_id);
