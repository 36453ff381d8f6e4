-- Appended to every database (issue 21): the data dir's identity and what this file knows of the
-- others. Keys: `data_dir_id` (random 128-bit hex, the same in all five files, written by `init` /
-- the first start), `data_dir_id_pending` (lifecycle.db only: the id being written, so a crash in
-- the middle of the first stamping resumes instead of looking like a recreated file).
CREATE TABLE IF NOT EXISTS store (
    key         TEXT PRIMARY KEY,
    value       TEXT NOT NULL,
    updated_at  INTEGER NOT NULL
);
