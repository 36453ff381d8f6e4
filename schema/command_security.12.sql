-- command_security.db step 12 (issue 37, a fleet worker restarted during an outage): the
-- worker's copy of the fleet registry's rules as of its last successful pull (`ask::learned`
-- writes it at each pull that changed them, reads it at start-up). A restarted worker that
-- cannot reach the registry still applies the restrictive rules of this copy (`never`,
-- `always_ask` overrides, however old); permissive ones (learned signatures, `always_allow`,
-- host rules, grants) are used only from a pull of the running worker, while fresh.
CREATE TABLE IF NOT EXISTS registry_copy (
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  rule TEXT NOT NULL,
  client_id TEXT NOT NULL,
  scope TEXT NOT NULL,
  target TEXT,
  value TEXT,
  learned_by TEXT NOT NULL,
  db_role TEXT NOT NULL,
  validation_id TEXT,
  created_at INTEGER NOT NULL,
  expires_at INTEGER,
  pulled_at INTEGER NOT NULL
);
