-- taskloom schema 8: which workflow versions each live process has loaded (ADR 0039).
-- A worker writes its row at start and on every heartbeat period; the row is live until
-- `expires_at` (microseconds since the Unix epoch). `loaded` is a JSON array of
-- [name, version] pairs. Readers union the live rows to tell a run that waits for a
-- version no process has from one that a process will take.
CREATE TABLE processes (
    id         TEXT    NOT NULL PRIMARY KEY,
    loaded     TEXT    NOT NULL,
    seen_at    INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

-- The workflow version a task recorded, copied from its body at insert (and by an
-- operator's `tasks upgrade`): what claims filter on, without reading each task's JSON.
ALTER TABLE tasks ADD COLUMN workflow_version TEXT;
UPDATE tasks SET workflow_version = json_extract(body, '$.workflow_version');
