-- taskloom schema 6: what the dashboard's task list filters and counts on (ADR 0030).
-- `created_us` is a copy of the task body's creation time (microseconds since the Unix
-- epoch, written once at insert); its index turns a time filter into a range of
-- positions. Counting by state reads only an index; a principal's tasks of one workflow
-- are one range of (owner, name, seq).
ALTER TABLE tasks ADD COLUMN created_us INTEGER;
UPDATE tasks SET created_us =
    CAST(round((julianday(json_extract(body, '$.created_at')) - 2440587.5) * 86400000000) AS INTEGER);
CREATE INDEX tasks_created ON tasks (created_us);
CREATE INDEX tasks_owner_state ON tasks (owner, state);
CREATE INDEX tasks_owner_name_seq ON tasks (owner, name, seq);
