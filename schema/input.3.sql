-- brainloop.input.db step 3 (user_version 2 → 3): job control (issue 36).
-- unique_key: a job with the same (client_id, unique_key) as one still queued, running or
--   waiting is refused with the first one's id (`enqueue --unique-key`; the worker's claim
--   refuses it too, so a raw INSERT cannot run it twice).
-- retry: the job's own retry policy, JSON (`retry::Policy`): {"max_attempts": 3,
--   "backoff_ms": 1000, "max_backoff_ms": 60000, "jitter": 0.5, "on": ["failed"]}.
ALTER TABLE jobs ADD COLUMN unique_key TEXT NULL;
ALTER TABLE jobs ADD COLUMN retry TEXT NULL;
CREATE INDEX IF NOT EXISTS jobs_unique_key ON jobs(client_id, unique_key) WHERE unique_key IS NOT NULL;
