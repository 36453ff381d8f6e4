-- output.db step 4 (issue 39, a confined command's path): before a command runs, its plan reads
-- when the same command was last asked about by another job (`ask::validations::last_requested`,
-- the duplicate warning). With only `validations_status`, that read scanned every validation ever
-- made, on every command job, growing with them; these indexes answer it with one row each.
CREATE INDEX IF NOT EXISTS validations_hash ON validations(command_hash, requested_at);
CREATE INDEX IF NOT EXISTS validations_command ON validations(command, requested_at);
