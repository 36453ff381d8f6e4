-- command_security.db step 14 (issue 50, a registry that goes back in time): what a fleet
-- worker last trusted of its registry (`ask::epoch`, its one owner) — the newest epoch, the
-- generation, the database's and the epochs table's oids —, the epochs it has seen (JSON
-- array: none of them is an operator's acceptance of a later restore), and the restore it
-- noticed and the operator has not accepted yet (`restored_at`, `restored_why`): while set, the
-- registry's permissive rules are not used, across restarts too.
CREATE TABLE IF NOT EXISTS registry_epoch (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  epoch TEXT NOT NULL,
  generation INTEGER NOT NULL,
  database_oid INTEGER NOT NULL,
  table_oid INTEGER NOT NULL,
  known TEXT NOT NULL DEFAULT '[]',
  restored_at INTEGER,
  restored_why TEXT
);
