-- taskloom schema 9: the CHECK constraints of tasks.state, node_runs.state and
-- node_attempts.outcome written as chains of comparisons (ADR 0054). SQLite evaluates
-- `column IN (a, b, c, ...)` of more than two values in a constraint by building a
-- temporary index of the list for each row it writes. The same values, the same rule
-- (NULL allowed where it was), so the stored rows satisfy the new text: it is changed in
-- place, by SQLite's documented procedure (lang_altertable.html, "Making Other Kinds Of
-- Table Schema Changes"), with no table copied. Where SQLite refuses writes to its schema
-- (defensive mode), schema.migrate() skips the rest of this file after the first
-- statement and the former constraints stay: the same rule, checked more slowly.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (state IN
                        (''queued'', ''running'', ''input_required'', ''completed'', ''failed'', ''cancelled''))',
    'CHECK (state = ''queued'' OR state = ''running'' OR state = ''input_required''
                        OR state = ''completed'' OR state = ''failed'' OR state = ''cancelled'')')
WHERE type = 'table' AND name = 'tasks';
UPDATE sqlite_schema SET sql = replace(sql,
    'CHECK (state IN (''running'', ''retrying'', ''waiting'', ''completed'', ''failed''))',
    'CHECK (state = ''running'' OR state = ''retrying'' OR state = ''waiting''
                          OR state = ''completed'' OR state = ''failed'')')
WHERE type = 'table' AND name = 'node_runs';
UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (outcome IN
                   (''completed'', ''failed'', ''timed_out'', ''cancelled'', ''interrupted'', ''waiting''))',
    'CHECK (outcome = ''completed'' OR outcome = ''failed'' OR outcome = ''timed_out''
                   OR outcome = ''cancelled'' OR outcome = ''interrupted'' OR outcome = ''waiting'')')
WHERE type = 'table' AND name = 'node_attempts';
-- Reload this connection's schema from the new text (a text that does not parse fails
-- here, and the migration rolls back).
PRAGMA writable_schema = RESET;
-- Fail loudly if a text was not found (a file whose tables were written otherwise): each
-- table must hold its chain and no IN list. The
-- table's creation and drop also move the schema cookie, so that other connections open on
-- the file reload the schema (the procedure's `PRAGMA schema_version` step).
CREATE TABLE schema_9_check (
    rewritten INTEGER CONSTRAINT "schema 9: a CHECK constraint's IN list was not found"
        CHECK (rewritten)
);
INSERT INTO schema_9_check
    SELECT count(*) = 3 FROM sqlite_schema
    WHERE type = 'table' AND name IN ('tasks', 'node_runs', 'node_attempts')
      AND instr(sql, ' = ''completed'' OR ') > 0
      AND instr(sql, 'state IN') = 0 AND instr(sql, 'outcome IN') = 0;
DROP TABLE schema_9_check;
