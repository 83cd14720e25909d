-- taskloom schema 3: durable waits (ADR 0021).
-- A parked run has no lease; it is claimed again once `wake_at` has passed (never while
-- it is NULL). Both are copies of the task body's fields, for the claim's filter.
ALTER TABLE tasks ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN wake_at INTEGER;  -- microseconds since the Unix epoch, UTC

-- SQLite cannot change a CHECK constraint in place: both run tables are rebuilt with the
-- `waiting` node state and attempt outcome (and `waiting_for`, what a waiting node waits for).
CREATE TABLE node_runs_v3 (
    task_id       TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    node          TEXT    NOT NULL,
    state         TEXT    NOT NULL
                      CHECK (state IN ('running', 'retrying', 'waiting', 'completed', 'failed')),
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    failures      INTEGER NOT NULL DEFAULT 0,
    interruptions INTEGER NOT NULL DEFAULT 0,
    not_before    INTEGER,
    waiting_for   TEXT,
    output        TEXT,                      -- JSON
    error         TEXT,                      -- JSON: error_type, message, fingerprint
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (task_id, node)
) WITHOUT ROWID;
INSERT INTO node_runs_v3
    (task_id, node, state, attempt, failures, interruptions, not_before, output, error, updated_at)
    SELECT task_id, node, state, attempt, failures, interruptions, not_before, output, error,
           updated_at
    FROM node_runs;
DROP TABLE node_runs;
ALTER TABLE node_runs_v3 RENAME TO node_runs;

CREATE TABLE node_attempts_v3 (
    task_id    TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    node       TEXT    NOT NULL,
    attempt    INTEGER NOT NULL,
    worker     TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at   INTEGER,
    outcome    TEXT CHECK (outcome IN
                   ('completed', 'failed', 'timed_out', 'cancelled', 'interrupted', 'waiting')),
    error      TEXT,
    PRIMARY KEY (task_id, node, attempt)
) WITHOUT ROWID;
INSERT INTO node_attempts_v3 SELECT task_id, node, attempt, worker, started_at, ended_at, outcome, error
    FROM node_attempts;
DROP TABLE node_attempts;
ALTER TABLE node_attempts_v3 RENAME TO node_attempts;
