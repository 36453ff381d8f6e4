-- brainloop.lifecycle.db step 5 (user_version 4 → 5): read_code's model digests (issue 25).

-- One validated digest per (content hash, model, prompt version): an unchanged file (or project
-- outline) summarised by the same model with the same prompt is never sent again. The hash is
-- SHA-256 over the kind ("file" / "project") and the exact content; the tokens are those the
-- digest cost when it was generated.
CREATE TABLE IF NOT EXISTS code_digests (
    content_hash        TEXT NOT NULL,
    model               TEXT NOT NULL,
    prompt_version      INTEGER NOT NULL,
    digest              TEXT NOT NULL,
    prompt_tokens       INTEGER NOT NULL,
    completion_tokens   INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    last_used_at        INTEGER NOT NULL,
    PRIMARY KEY (content_hash, model, prompt_version)
) WITHOUT ROWID;
