-- command_security.db step 11 (issue 39, a confined command's recording): the learning step of
-- every run (`bash::evidence::stats`) reads the last `DEMOTION_WINDOW` runs of (command, client)
-- newest first. With only `executions_hash (command_hash, executed_at)` SQLite read every run of
-- the command within retention and sorted them (3.5 ms of CPU per recorded run at 10,000 runs of
-- one command, growing with them); this index answers it with the window's rows.
CREATE INDEX IF NOT EXISTS executions_client ON executions(command_hash, client_id, id);
