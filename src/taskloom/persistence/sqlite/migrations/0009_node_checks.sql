-- taskloom schema 9: the node tables' CHECK constraints written as comparisons (ADR 0054).
-- SQLite evaluates `column IN (a, b, c, ...)` of more than two values in a constraint by
-- building a temporary index of the list for each row it writes: every node's end (an
-- attempt's outcome, a checkpoint's state) paid for one or two. The same values, the same
-- rule, as a chain of comparisons. SQLite cannot change a CHECK constraint in place: both
-- run tables are rebuilt, their rows copied as they are; rows of a task that no longer
-- exists (left only by a delete made with foreign keys off) are not: nothing reads them,
-- and the new tables' foreign keys would refuse them.
CREATE TABLE node_runs_v9 (
    task_id       TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    node          TEXT    NOT NULL,
    state         TEXT    NOT NULL CHECK (state = 'running' OR state = 'retrying'
                      OR state = 'waiting' OR state = 'completed' OR state = 'failed'),
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
INSERT INTO node_runs_v9
    (task_id, node, state, attempt, failures, interruptions, not_before, waiting_for, output,
     error, updated_at)
    SELECT task_id, node, state, attempt, failures, interruptions, not_before, waiting_for,
           output, error, updated_at
    FROM node_runs WHERE task_id IN (SELECT id FROM tasks);
DROP TABLE node_runs;
ALTER TABLE node_runs_v9 RENAME TO node_runs;

CREATE TABLE node_attempts_v9 (
    task_id    TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    node       TEXT    NOT NULL,
    attempt    INTEGER NOT NULL,
    worker     TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at   INTEGER,
    outcome    TEXT CHECK (outcome = 'completed' OR outcome = 'failed'
                   OR outcome = 'timed_out' OR outcome = 'cancelled'
                   OR outcome = 'interrupted' OR outcome = 'waiting'),
    error      TEXT,
    PRIMARY KEY (task_id, node, attempt)
) WITHOUT ROWID;
INSERT INTO node_attempts_v9
    (task_id, node, attempt, worker, started_at, ended_at, outcome, error)
    SELECT task_id, node, attempt, worker, started_at, ended_at, outcome, error
    FROM node_attempts WHERE task_id IN (SELECT id FROM tasks);
DROP TABLE node_attempts;
ALTER TABLE node_attempts_v9 RENAME TO node_attempts;
