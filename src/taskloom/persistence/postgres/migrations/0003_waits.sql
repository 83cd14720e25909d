-- taskloom PostgreSQL schema 3: durable waits (ADR 0021).
-- A parked run has no lease; it is claimed again once `wake_at` has passed (never while
-- it is NULL). Both are copies of the task body's fields, for the claim's filter.
ALTER TABLE tasks ADD COLUMN parked boolean NOT NULL DEFAULT false;
ALTER TABLE tasks ADD COLUMN wake_at timestamptz;

-- The `waiting` node state and attempt outcome; what a waiting node waits for.
ALTER TABLE node_runs ADD COLUMN waiting_for text;
ALTER TABLE node_runs DROP CONSTRAINT node_runs_state_check;
ALTER TABLE node_runs ADD CONSTRAINT node_runs_state_check
    CHECK (state IN ('running', 'retrying', 'waiting', 'completed', 'failed'));
ALTER TABLE node_attempts DROP CONSTRAINT node_attempts_outcome_check;
ALTER TABLE node_attempts ADD CONSTRAINT node_attempts_outcome_check
    CHECK (outcome IN ('completed', 'failed', 'timed_out', 'cancelled', 'interrupted', 'waiting'));
