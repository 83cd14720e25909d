"""Built-in workflows, written against the public DAG API only. Not built yet."""
