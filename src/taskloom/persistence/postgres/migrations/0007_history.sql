-- taskloom PostgreSQL schema 7: the history of each task's state and status message
-- (ADR 0036). One row per recorded change, written in the transaction that writes the
-- task; `version` is the task's version that change produced. Tasks stored before this
-- schema get one row, their state now (cause `migrated`). Deleted with the task.
CREATE TABLE task_history (
    task_id        text        NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    version        integer     NOT NULL,
    at             timestamptz NOT NULL,
    state          text        NOT NULL,
    status_message text,
    cause          text        NOT NULL,
    state_changed  boolean     NOT NULL,         -- false: a status-message-only row (capped)
    PRIMARY KEY (task_id, version)
);
INSERT INTO task_history (task_id, version, at, state, status_message, cause, state_changed)
    SELECT id, version, updated_at, state, body->>'status_message', 'migrated', true
    FROM tasks;
