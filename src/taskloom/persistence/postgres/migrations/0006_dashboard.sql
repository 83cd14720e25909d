-- taskloom PostgreSQL schema 6: what the dashboard's task list filters and counts on (ADR 0030).
-- `created_at` is a copy of the task body's field; its index turns a time filter into a
-- range of positions. Counting by state reads only the (owner, state) index; a
-- principal's tasks of one workflow are one range of (owner, name, position).
ALTER TABLE tasks ADD COLUMN created_at timestamptz;
UPDATE tasks SET created_at = (body->>'created_at')::timestamptz;
CREATE INDEX tasks_created ON tasks (created_at);
CREATE INDEX tasks_owner_state ON tasks (owner, state);
CREATE INDEX tasks_owner_name_position ON tasks (owner, name, position);
