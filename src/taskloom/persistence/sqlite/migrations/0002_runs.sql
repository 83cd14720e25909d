-- taskloom schema 2: workflow runs (leases, node checkpoints, node attempts).

ALTER TABLE tasks ADD COLUMN name TEXT NOT NULL DEFAULT '';
UPDATE tasks SET name = json_extract(body, '$.name');

-- Active tasks in creation order: what workers scan to claim runs.
CREATE INDEX tasks_active ON tasks (seq) WHERE state IN ('queued', 'running', 'input_required');

-- One row per run a worker owns; `token` fences every write of that worker.
CREATE TABLE leases (
    task_id    TEXT    NOT NULL PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    worker     TEXT    NOT NULL,
    token      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL              -- microseconds since the Unix epoch, UTC
) WITHOUT ROWID;
CREATE INDEX leases_worker ON leases (worker);

-- A node's checkpoint: its state and, once completed, its output (stored together).
CREATE TABLE node_runs (
    task_id       TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    node          TEXT    NOT NULL,
    state         TEXT    NOT NULL CHECK (state IN ('running', 'retrying', 'completed', 'failed')),
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    failures      INTEGER NOT NULL DEFAULT 0,
    interruptions INTEGER NOT NULL DEFAULT 0,
    not_before    INTEGER,
    output        TEXT,                      -- JSON
    error         TEXT,                      -- JSON: error_type, message, fingerprint
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (task_id, node)
) WITHOUT ROWID;

-- Every attempt, for the execution history.
CREATE TABLE node_attempts (
    task_id    TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    node       TEXT    NOT NULL,
    attempt    INTEGER NOT NULL,
    worker     TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at   INTEGER,
    outcome    TEXT CHECK (outcome IN ('completed', 'failed', 'timed_out', 'cancelled', 'interrupted')),
    error      TEXT,
    PRIMARY KEY (task_id, node, attempt)
) WITHOUT ROWID;
