-- taskloom schema 10: the partial index tasks_active dropped (ADR 0056). SQLite uses a
-- partial index only for a query whose WHERE holds the index's condition term for term,
-- and no query of this store does: the claim and the count of unfinished versions list
-- the active states in another order ('input_required', 'queued', 'running'), the
-- listing and the quota's count bind them as parameters. The claim is served by
-- tasks_state_seq. The index only cost every task write its upkeep and, to evaluate its
-- `state IN (...)` condition, a temporary b-tree of the list for the old row and one for
-- the new (EXPLAIN shows the OpenEphemeral). Dropping an index changes no result.
DROP INDEX IF EXISTS tasks_active;
