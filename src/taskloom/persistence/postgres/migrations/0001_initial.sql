-- taskloom PostgreSQL schema 1: tasks and workflow runs (leases, node checkpoints, attempts).
-- `body` holds the whole task as JSON (the engine's Task model); the other columns of
-- `tasks` are copies of the fields that queries filter, order or compare-and-set on.
CREATE TABLE tasks (
    position        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- list order, cursors
    id              text        NOT NULL UNIQUE,
    name            text        NOT NULL,
    owner           text,                         -- NULL: an unauthenticated local caller
    state           text        NOT NULL CHECK (state IN
                        ('queued', 'running', 'input_required', 'completed', 'failed', 'cancelled')),
    version         integer     NOT NULL CHECK (version >= 1),
    updated_at      timestamptz NOT NULL,
    expires_at      timestamptz,                  -- NULL: kept forever
    idempotency_key text,
    body            json        NOT NULL
);

CREATE UNIQUE INDEX tasks_idempotency
    ON tasks (coalesce(owner, ''), idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_owner_position ON tasks (owner, position);
CREATE INDEX tasks_state_position ON tasks (state, position);
CREATE INDEX tasks_expires ON tasks (expires_at) WHERE expires_at IS NOT NULL;
-- Active tasks in creation order: what workers scan to claim runs.
CREATE INDEX tasks_active ON tasks (position) WHERE state IN ('queued', 'running', 'input_required');

-- One row per run a worker owns; `token` fences every write of that worker.
CREATE TABLE leases (
    task_id    text        NOT NULL PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    worker     text        NOT NULL,
    token      text        NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX leases_worker ON leases (worker);

-- A node's checkpoint: its state and, once completed, its output (stored together).
CREATE TABLE node_runs (
    task_id       text        NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    node          text        NOT NULL,
    state         text        NOT NULL CHECK (state IN ('running', 'retrying', 'completed', 'failed')),
    attempt       integer     NOT NULL CHECK (attempt >= 1),
    failures      integer     NOT NULL DEFAULT 0,
    interruptions integer     NOT NULL DEFAULT 0,
    not_before    timestamptz,
    output        text,                           -- JSON, exactly as Python wrote it
    error         text,                           -- JSON: error_type, message, fingerprint
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (task_id, node)
);

-- Every attempt, for the execution history.
CREATE TABLE node_attempts (
    task_id    text        NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    node       text        NOT NULL,
    attempt    integer     NOT NULL,
    worker     text        NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz,
    outcome    text CHECK (outcome IN ('completed', 'failed', 'timed_out', 'cancelled', 'interrupted')),
    error      text,
    PRIMARY KEY (task_id, node, attempt)
);
