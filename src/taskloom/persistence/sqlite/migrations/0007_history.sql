-- taskloom schema 7: the history of each task's state and status message (ADR 0036).
-- One row per recorded change, written in the transaction that writes the task; `version`
-- is the task's version that change produced. Keyed by the task's position (`seq`), not
-- its random id, so the rows of new tasks are appended at the end of the table instead of
-- scattered through it (fewer pages written per commit). Tasks stored before this schema
-- get one row, their state now (cause `migrated`). Deleted with the task.
CREATE TABLE task_history (
    task_seq       INTEGER NOT NULL REFERENCES tasks (seq) ON DELETE CASCADE,
    version        INTEGER NOT NULL,
    at             INTEGER NOT NULL,             -- microseconds since the Unix epoch, UTC
    state          TEXT    NOT NULL,
    status_message TEXT,
    cause          TEXT    NOT NULL,
    state_changed  INTEGER NOT NULL,             -- 0: a status-message-only row (capped)
    PRIMARY KEY (task_seq, version)
) WITHOUT ROWID;
INSERT INTO task_history (task_seq, version, at, state, status_message, cause, state_changed)
    SELECT seq, version, updated_at, state, json_extract(body, '$.status_message'), 'migrated', 1
    FROM tasks;
