-- taskloom schema 11: tasks_owner_state (owner, state) becomes tasks_owner_state_seq
-- (owner, state, seq), so a claim reads each owner's first candidates of each active
-- state in creation order from the index instead of ranking every active run (ADR 0067):
-- a claim's cost no longer grows with the queue. The dashboard's counts by owner and
-- state use the index's first two columns as before. One index replaces another: a task
-- write keeps the same number of indexes to maintain.
DROP INDEX IF EXISTS tasks_owner_state;
CREATE INDEX tasks_owner_state_seq ON tasks (owner, state, seq);
