-- taskloom schema 1: tasks.
-- `body` holds the whole task as JSON (the engine's Task model); the other columns are
-- copies of the fields that queries filter, order or compare-and-set on.
CREATE TABLE tasks (
    seq             INTEGER PRIMARY KEY,          -- insertion order: list order and cursors
    id              TEXT    NOT NULL UNIQUE,
    owner           TEXT,                         -- NULL: an unauthenticated local caller
    state           TEXT    NOT NULL CHECK (state IN
                        ('queued', 'running', 'input_required', 'completed', 'failed', 'cancelled')),
    version         INTEGER NOT NULL CHECK (version >= 1),
    updated_at      INTEGER NOT NULL,             -- microseconds since the Unix epoch, UTC
    expires_at      INTEGER,                      -- microseconds; NULL: kept forever
    idempotency_key TEXT,
    body            TEXT    NOT NULL
);

CREATE UNIQUE INDEX tasks_idempotency
    ON tasks (coalesce(owner, ''), idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_owner_seq ON tasks (owner, seq);
CREATE INDEX tasks_state_seq ON tasks (state, seq);
CREATE INDEX tasks_expires ON tasks (expires_at) WHERE expires_at IS NOT NULL;
