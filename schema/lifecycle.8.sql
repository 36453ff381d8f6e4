-- brainloop.lifecycle.db step 8 (user_version 7 → 8): job control (issue 36), in the claimed
-- snapshot: the job's unique_key (an open job holds it) and its effective retry policy (the
-- job's own or its action's, JSON, `retry::Policy`; NULL: a failure is final).
ALTER TABLE queue ADD COLUMN unique_key TEXT NULL;
ALTER TABLE queue ADD COLUMN retry TEXT NULL;
CREATE INDEX IF NOT EXISTS queue_unique_key ON queue(client_id, unique_key) WHERE unique_key IS NOT NULL;
