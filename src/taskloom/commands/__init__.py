"""The operator's commands besides ``serve``: run, tasks, workflows, db, worker and tokens.

Each module defines click commands whose callback hands the parsed flags to an async
handler through :func:`taskloom.commands.dispatch.dispatch`; :mod:`taskloom.commands.app`
puts them together. The handler returns the exit code (see ``common.EXIT_*``).
"""
