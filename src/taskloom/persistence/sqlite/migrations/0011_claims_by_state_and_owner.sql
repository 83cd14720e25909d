-- taskloom schema 11: tasks_owner_state (owner, state) becomes tasks_state_owner_seq
-- (state, owner, seq), so a claim finds the owners with runs in each active state and
-- reads each one's first candidates in creation order from the index, instead of
-- ranking every active run (ADR 0067): a claim's cost no longer grows with the queue.
-- The quota's and the dashboard's capped counts (state = ? AND owner = ?) read the
-- index's first two columns as before. One index replaces another: a task write keeps
-- the same number of indexes to maintain.
DROP INDEX IF EXISTS tasks_owner_state;
CREATE INDEX tasks_state_owner_seq ON tasks (state, owner, seq);
