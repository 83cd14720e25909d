"""Built-in workflows (`countdown`, `repo_audit`, `command_matrix`), one module each, written
against the public DAG API only; the other modules here are their shared helpers."""
