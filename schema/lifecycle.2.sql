-- brainloop.lifecycle.db step 2 (user_version 1 → 2): stored permission inference (seed 002
-- AC5–6). One row per (code hash, language, rules version): the same code is never analysed
-- twice with the same rules and MCP mapping; `report` is the full InferReport JSON.
CREATE TABLE IF NOT EXISTS inferred_permissions (
    code_hash       TEXT NOT NULL,     -- SHA-256 of the code (hex)
    language        TEXT NOT NULL,     -- js | ts
    rules_version   TEXT NOT NULL,     -- INFER_VERSION + MCP mapping fingerprint
    permission_set  TEXT NOT NULL DEFAULT 'minimal',
    confidence      REAL NOT NULL DEFAULT 0.0,
    report          TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    last_used_at    INTEGER NOT NULL,
    hits            INTEGER NOT NULL DEFAULT 0,   -- times served from this row
    PRIMARY KEY (code_hash, language, rules_version)
);
CREATE INDEX IF NOT EXISTS inferred_permissions_set ON inferred_permissions(permission_set);
