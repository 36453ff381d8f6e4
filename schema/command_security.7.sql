-- A bounded egress record (issue 33): past the first attempts of a run recorded one by one, one
-- row per host, port and outcome stands for `attempts` attempts, from `first_ms` to `at_ms`;
-- the connections closed past a run's cap are one such row (protocol 'cap').
ALTER TABLE egress_connections ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;
ALTER TABLE egress_connections ADD COLUMN first_ms INTEGER;
