-- taskloom PostgreSQL schema 10: tasks_owner_state (owner, state) becomes
-- tasks_state_owner_position (state, owner, position), so a claim finds the owners with
-- runs in each active state and reads each one's first candidates in creation order
-- from the index, instead of ranking every active run (ADR 0067): a claim's cost no
-- longer grows with the queue. The quota's and the dashboard's capped counts (state = ?
-- AND owner = ?) read the index's first two columns as before. One index replaces
-- another: a task write keeps the same number of indexes to maintain. The table is
-- analysed as the index is built: a claim's plan relies on the statistics of tasks
-- (without them the planner reads each owner's whole state; autovacuum keeps them
-- afterwards).
DROP INDEX IF EXISTS tasks_owner_state;
CREATE INDEX tasks_state_owner_position ON tasks (state, owner, position);
ANALYZE tasks;
