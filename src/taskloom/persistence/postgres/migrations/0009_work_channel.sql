-- taskloom PostgreSQL schema 9: the changes a worker acts on are also announced on the
-- channel `taskloom_work` (same payload), so a process that only runs a worker listens to
-- that channel alone and no longer receives every claim, progress write and end of every
-- other worker (ADR 0062). `taskloom_changes` still carries every change, unchanged.
-- On `taskloom_work`: new work (queued), and a parked run that became claimable or got
-- a timer (queued, unless parked without a wake time; input_required, parked with a wake
-- time: an answer while other questions wait, a child's end); a cancel or a failure written
-- by any process (it stops the nodes of a run that another worker executes). A run's own
-- end (completed, written by its lease holder) and claims, progress, questions asked are
-- not: no other worker acts on them.
CREATE OR REPLACE FUNCTION announce_task_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    payload text := concat_ws(' ', TG_TABLE_SCHEMA,
                              coalesce(current_setting('taskloom.origin', true), ''),
                              NEW.id, NEW.state);
BEGIN
    PERFORM pg_notify('taskloom_changes', payload);
    IF (NEW.state = 'queued' AND (NOT NEW.parked OR NEW.wake_at IS NOT NULL))
        OR (NEW.state = 'input_required' AND NEW.parked AND NEW.wake_at IS NOT NULL)
        OR NEW.state IN ('cancelled', 'failed') THEN
        PERFORM pg_notify('taskloom_work', payload);
    END IF;
    RETURN NULL;
END
$$;
