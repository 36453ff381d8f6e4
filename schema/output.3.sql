-- output.db step 3 (issue 21): the worker's own view of what keeps it from progressing, as JSON
-- {"cause": {"error": "...", "since": unix_ms}, ...}; NULL when nothing does. Read by `status`.
ALTER TABLE heartbeat ADD COLUMN problem TEXT NULL;
