-- taskloom schema 4: child workflows (ADR 0026).
-- `parent_id` is a copy of the task body's field: the task whose node started this one.
-- No foreign key: a child outlives its parent's deletion (it has a retention of its own).
ALTER TABLE tasks ADD COLUMN parent_id TEXT;
CREATE INDEX tasks_by_parent ON tasks (parent_id) WHERE parent_id IS NOT NULL;
