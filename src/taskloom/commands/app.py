"""The command tree (click): every command, its flags and their variables.

Only click and the shared options are imported here; each command's handler module (and
with it the engine's store and drivers) is imported when that command runs.
"""

from collections.abc import Callable
from typing import Any, Final

import click

from taskloom.commands import options
from taskloom.commands.dispatch import dispatch
from taskloom.commands.durations import DURATION, RETENTION

TASK_STATES: Final = ("queued", "running", "input_required", "completed", "failed", "cancelled")
"""``TaskState``'s values (a test checks them)."""
FINISHED_STATES: Final = ("cancelled", "completed", "failed")


@click.command(
    "serve",
    short_help="serve MCP over stdio (or Streamable HTTP with --http)",
    help="Serve the workflows as MCP tools over stdin and stdout, or over Streamable HTTP "
    "with --http. Ctrl-C or SIGTERM stops it; runs in flight resume elsewhere.",
)
@options.settings_of("serve")
def serve(**params: Any) -> None:
    dispatch("serve:serve", params)


@click.command(
    "run",
    short_help="run a workflow here, with live progress",
    help="Run WORKFLOW as a durable task in this process and show its progress. INPUT "
    "(or --input) is its arguments: a JSON object, @FILE, or @- for stdin. Ctrl-C cancels "
    "it. Exit code: 0 completed, 1 failed, 130 cancelled.",
)
@click.argument("workflow")
@click.argument("input_text", metavar="[INPUT]", required=False)
@options.flag(
    "--input",
    "input_flag",
    envvar="TASKLOOM_INPUT",
    metavar="JSON|@FILE",
    help="its arguments, instead of INPUT",
    note="; default {}",
)
@options.flag(
    "--ttl",
    envvar="TASKLOOM_TTL",
    type=RETENTION,
    default=options.from_project("ttl"),
    metavar="DURATION",
    help="keep the task this long after its creation, e.g. 7d or 12h, or 'forever'",
    note="; default: the workflow's retention, else 30 days; at most 365 days",
)
@options.db
@options.workflows
@options.settings
def run(**params: Any) -> None:
    dispatch("run:run", params)


@click.group("tasks", short_help="list, inspect, cancel, answer, resume, delete and purge tasks")
def tasks() -> None:
    """Tasks in the database: list, show, result, watch, cancel, answer, resume, delete,
    purge."""


def _task_command(
    name: str, short_help: str, **kwargs: Any
) -> Callable[[Callable[..., None]], click.Command]:
    """A ``tasks`` action with ``--db``, ``--json`` and ``--workflows``."""

    def decorate(function: Callable[..., None]) -> click.Command:
        function = options.workflows(options.json_output(options.db(function)))
        return tasks.command(name, short_help=short_help, **kwargs)(function)

    return decorate


@_task_command("list", "tasks, newest first", help="Tasks, newest first.")
@options.states(
    "TASKLOOM_STATE",
    TASK_STATES,
    f"only tasks in these states ({', '.join(TASK_STATES)}); repeat or separate with commas",
)
@options.flag(
    "--workflow",
    "workflow",
    envvar="TASKLOOM_WORKFLOW",
    metavar="NAME",
    help="only tasks of this workflow",
)
@options.flag(
    "--since",
    envvar="TASKLOOM_SINCE",
    metavar="WHEN",
    help="only tasks created since then: a duration ago (2h, 3d) or an ISO time "
    "(2026-11-24T08:00, UTC unless it says)",
)
@options.flag(
    "--limit",
    type=int,
    envvar="TASKLOOM_LIMIT",
    default=50,
    show_default=True,
    help="at most this many, 1 to 1000",
)
@options.flag(
    "--cursor",
    envvar="TASKLOOM_CURSOR",
    help="continue after the page that gave this next_cursor",
)
def tasks_list(**params: Any) -> None:
    dispatch("tasks_read:list_tasks", params)


@_task_command("show", "a task, its phases, nodes, attempts and timeline")
@click.argument("task_id", metavar="ID")
def tasks_show(**params: Any) -> None:
    """A task: its phases in order, each node's state, attempts and durations (a map's
    items folded into the map, child tasks under it), and a timeline."""
    dispatch("tasks_read:show_task", params)


@_task_command("result", "a finished task's result (exit 1 if it failed, 130 if cancelled)")
@click.argument("task_id", metavar="ID")
@options.flag("--wait", is_flag=True, envvar="TASKLOOM_WAIT", help="wait for the task to finish")
def tasks_result(**params: Any) -> None:
    """A finished task's result as JSON; exit 1 if it failed, 130 if it was cancelled."""
    dispatch("tasks_read:task_result", params)


@_task_command(
    "watch", "follow a task's progress until it ends (Ctrl-C stops watching, not the task)"
)
@click.argument("task_id", metavar="ID")
def tasks_watch(**params: Any) -> None:
    """Follow a task's progress until it ends, whichever process runs it. Ctrl-C stops
    watching, not the task."""
    dispatch("tasks_watch:watch_task", params)


@_task_command("cancel", "cancel a task that has not finished")
@click.argument("task_id", metavar="ID")
@options.flag(
    "--reason",
    envvar="TASKLOOM_REASON",
    default="cancelled by the operator",
    show_default=True,
    help="shown as the task's status",
)
def tasks_cancel(**params: Any) -> None:
    """Cancel a task; its running nodes stop wherever they run."""
    dispatch("tasks_change:cancel_task", params)


@_task_command("answer", "answer the question a task waits on")
@click.argument("task_id", metavar="ID")
@click.argument("answer", metavar="JSON|@FILE")
@options.flag("--key", envvar="TASKLOOM_KEY", help="which question, when several are pending")
def tasks_answer(**params: Any) -> None:
    """Answer the question a task waits on (the answer must match its schema)."""
    dispatch("tasks_change:answer_task", params)


@_task_command(
    "resume",
    "run a failed or cancelled task again as a new task, keeping its completed nodes",
    help="Create a new task with the same workflow, version and arguments. Nodes that "
    "completed are kept; the failed ones (or --from NODE) and every node after them run "
    "again. The old task is left as it was.",
)
@click.argument("task_id", metavar="ID")
@options.flag(
    "--from",
    "from_node",
    envvar="TASKLOOM_FROM",
    metavar="NODE",
    help="run this node and its dependents again even if they completed",
)
@options.flag(
    "--run",
    is_flag=True,
    envvar="TASKLOOM_RUN",
    help="run the new task here with live progress, as `taskloom run` does; otherwise "
    "a worker or server on this database runs it",
)
@options.settings
def tasks_resume(**params: Any) -> None:
    dispatch("tasks_change:resume_task", params)


@_task_command(
    "upgrade",
    "move unfinished runs to another loaded version of their workflow",
    help="Move unfinished runs to another version of their workflow that --workflows "
    "loads, when you know their checkpoints still fit it: the completed nodes that the "
    "new version has are kept (their outputs are checked against its types first), the "
    "rest runs on the new code. A run a worker is executing now is refused; it moves "
    "while it waits. Each move is recorded in the task's history (cause: upgraded).",
)
@click.argument("task_ids", nargs=-1, metavar="[ID...]")
@options.flag(
    "--to",
    "to_version",
    required=True,
    envvar="TASKLOOM_TO",
    metavar="VERSION",
    help="the version to move them to",
)
@options.flag(
    "--all-of",
    "all_of",
    envvar="TASKLOOM_ALL_OF",
    metavar="NAME@VERSION",
    help="every unfinished run of this workflow version, instead of IDs",
)
def tasks_upgrade(**params: Any) -> None:
    dispatch("tasks_upgrade:upgrade_tasks", params)


@_task_command(
    "delete",
    "delete finished tasks and their history now",
    help="Delete finished tasks (completed, failed or cancelled) with their nodes and "
    "attempts. An unfinished task is refused: cancel it first.",
)
@click.argument("task_ids", nargs=-1, required=True, metavar="ID...")
def tasks_delete(**params: Any) -> None:
    dispatch("tasks_delete:delete_tasks", params)


@_task_command(
    "purge",
    "delete the tasks that finished longer ago than --older-than",
    help="Delete every task that finished (completed, failed or cancelled) longer ago "
    "than --older-than, with its history; print how many.",
)
@options.flag(
    "--older-than",
    envvar="TASKLOOM_OLDER_THAN",
    type=DURATION,
    required=True,
    metavar="DURATION",
    help="finished longer ago than this, e.g. 30d or 12h",
)
@options.states(
    "TASKLOOM_PURGE_STATE",
    FINISHED_STATES,
    "only tasks that ended in these states; repeat or separate with commas",
    "; default: all three",
)
def tasks_purge(**params: Any) -> None:
    dispatch("tasks_delete:purge_tasks", params)


@click.group("workflows", short_help="the workflows that can run, and their DAGs")
def workflows() -> None:
    """The workflows this process can run (built-in, installed, --workflows, and the
    project file's), and their DAGs."""


@workflows.command("list", short_help="every loaded workflow version, and the database's")
@options.json_output
@options.db
@options.workflows
def workflows_list(**params: Any) -> None:
    """Every loaded workflow version: nodes, phases. When the database exists, also each
    version it has unfinished runs of or a running worker has loaded: how many runs,
    the oldest, and whether it is safe to remove."""
    dispatch("workflows:list_workflows", params)


@workflows.command("show", short_help="a workflow's DAG by phase, and its input")
@click.argument("name", metavar="WORKFLOW")
@options.json_output
@options.workflows
def workflows_show(**params: Any) -> None:
    """A workflow's DAG phase by phase (map and child-workflow nodes marked), and its
    input fields."""
    dispatch("workflows:show_workflow", params)


@click.group("db", short_help="create, upgrade, check and clean the database")
def db() -> None:
    """Create, upgrade, check and clean the database."""


@db.command("migrate", short_help="create the database, or bring its schema up to date")
@options.db
@options.json_output
def db_migrate(**params: Any) -> None:
    """Create the database, or bring its schema up to date."""
    dispatch("db:migrate_database", params)


@db.command(
    "check",
    short_help="SQLite's integrity checks and what the file holds (exit 1 on a problem)",
)
@options.db
@options.json_output
def db_check(**params: Any) -> None:
    """SQLite's integrity checks, the schema version, tasks per state and leases held;
    exit 1 on a problem."""
    dispatch("db:check_database", params)


@db.command("gc", short_help="delete the tasks whose retention ran out")
@options.db
@options.json_output
def db_gc(**params: Any) -> None:
    """Delete the tasks whose retention ran out (servers and workers do it every minute)."""
    dispatch("db:collect_garbage", params)


@click.command("worker", short_help="run queued tasks from the database until stopped")
@options.settings_of("worker")
def worker(**params: Any) -> None:
    """Run the workflows' tasks from the database (no MCP); Ctrl-C or SIGTERM stops it and
    hands its runs back."""
    dispatch("worker:run_worker", params)


@click.command("ui", short_help="serve the web dashboard of a database (read-only)")
@options.flag(
    "--host",
    envvar="TASKLOOM_UI_HOST",
    default=options.from_project("ui.host", "127.0.0.1"),
    help="address to listen on",
    note="; default 127.0.0.1",
)
@options.flag(
    "--port",
    type=int,
    envvar="TASKLOOM_UI_PORT",
    default=options.from_project("ui.port", 8780),
    help="port to listen on",
    note="; default 8780",
)
@options.flag(
    "--allow-actions",
    is_flag=True,
    envvar="TASKLOOM_UI_ALLOW_ACTIONS",
    help="let viewers cancel, answer and resume tasks",
)
@options.db
@options.workflows
@options.log_format
@options.log_level
def ui(**params: Any) -> None:
    """Serve the web dashboard of a database alone, at http://HOST:PORT/ui/: read-only
    unless --allow-actions, and no worker runs. Tokens come from TASKLOOM_TOKENS and the
    database's stored tokens; without any, it serves the operator on loopback only.
    Its sign-ins and actions are audit records at INFO (--log-level info)."""
    import os
    import sys

    from taskloom.commands.ui import serve_dashboard

    options.setup_logging(params["log_format"], params["log_level"])
    sys.exit(
        serve_dashboard(
            params["db"],
            host=params["host"],
            port=params["port"],
            allow_actions=params["allow_actions"],
            workflows=params["workflows"],
            tokens=os.environ.get("TASKLOOM_TOKENS", ""),
        )
    )


@click.group("tokens", short_help="create, list and revoke HTTP access tokens")
def tokens() -> None:
    """The access tokens of the HTTP endpoint (stored as hashes)."""


@tokens.command("create", short_help="create a token and print it (once)")
@options.flag(
    "--principal", envvar="TASKLOOM_PRINCIPAL", required=True, help="who the token acts for"
)
@options.flag(
    "--expires",
    envvar="TASKLOOM_EXPIRES",
    default="90d",
    show_default=True,
    metavar="DURATION",
    help="lifetime: N followed by s, m, h or d, or 'never'",
)
@options.flag(
    "--scope",
    "scope",
    multiple=True,
    envvar="TASKLOOM_SCOPE",
    metavar="SCOPE",
    help="'read' (read-only) or 'workflows:NAME[,NAME]' (only these); repeatable; none: everything",
    note=", space-separated",
)
@options.db
@options.json_output
def tokens_create(**params: Any) -> None:
    """Create a token and print it: the only time its secret is shown."""
    dispatch("tokens:create_token", params)


@tokens.command("list", short_help="every token: id, principal, scopes, expiry, state")
@options.db
@options.json_output
def tokens_list(**params: Any) -> None:
    """Every token, oldest first, without secrets."""
    dispatch("tokens:list_tokens", params)


@tokens.command("revoke", short_help="revoke a token (from the server's next request)")
@click.argument("id", metavar="ID")
@options.db
@options.json_output
def tokens_revoke(**params: Any) -> None:
    """Revoke a token by id (the hex digits after tl_); revoking twice is not an error."""
    dispatch("tokens:revoke_token", params)


COMMANDS: Final = (serve, run, tasks, workflows, db, worker, tokens, ui)
NAMES: Final = tuple(command.name or "" for command in COMMANDS)
