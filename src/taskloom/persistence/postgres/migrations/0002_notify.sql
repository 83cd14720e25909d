-- taskloom PostgreSQL schema 2: every committed task change is announced on the channel
-- `taskloom_changes` (LISTEN/NOTIFY), so workers wake on new work and cancellations reach
-- the worker running the task at once, whichever process made the change.
-- Payload: "<schema> <origin> <task id> <state>"; <origin> is the writing store's
-- `taskloom.origin` setting (empty for other clients), so a store can skip its own changes.
CREATE FUNCTION announce_task_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(
        'taskloom_changes',
        concat_ws(' ', TG_TABLE_SCHEMA, coalesce(current_setting('taskloom.origin', true), ''),
                  NEW.id, NEW.state)
    );
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_announce AFTER INSERT OR UPDATE ON tasks
    FOR EACH ROW EXECUTE FUNCTION announce_task_change();
