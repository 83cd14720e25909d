-- taskloom schema 6: what the dashboard's task list filters and counts on (ADR 0030).
-- `created_ms` reads the creation time out of the body (no write copies it); its index
-- turns a time filter into a range of positions. Counting by state reads only the index.
ALTER TABLE tasks ADD COLUMN created_ms INTEGER GENERATED ALWAYS AS
    (CAST(round((julianday(json_extract(body, '$.created_at')) - 2440587.5) * 86400000) AS INTEGER))
    VIRTUAL;
CREATE INDEX tasks_created ON tasks (created_ms);
CREATE INDEX tasks_owner_state ON tasks (owner, state);
CREATE INDEX tasks_name_seq ON tasks (name, seq);
