"""``taskloom db migrate|check|gc``: looking after the database."""

from taskloom.commands.arguments import DbArgs
from taskloom.commands.base import EXIT_FAILED, EXIT_OK, CommandError
from taskloom.commands.common import open_store, print_json, show
from taskloom.engine.manager import TaskManager
from taskloom.persistence.factory import describe_database
from taskloom.persistence.sqlite import SqliteTaskStore


async def migrate_database(args: DbArgs) -> int:
    """Open (creating or migrating) the database and say which schema version it has."""
    name = describe_database(args.db)
    async with open_store(args.db, create=True) as store:
        version: int | None = None  # PostgreSQL: migrated on open, no file to inspect
        if isinstance(store, SqliteTaskStore):
            version = (await store.health()).schema_version
    shown = "schema up to date" if version is None else f"schema version {version} (the latest)"
    return show(args.json, {"database": name, "schema_version": version}, f"{name}: {shown}")


async def check_database(args: DbArgs) -> int:
    """Report problems (none, when healthy), the schema version and task counts."""
    name = describe_database(args.db)
    async with open_store(args.db, read_only=True) as store:
        if not isinstance(store, SqliteTaskStore):
            raise CommandError(
                f"db check reads an SQLite file; {name} is PostgreSQL: use its own tools "
                "(its schema is checked every time taskloom opens it)"
            )
        health = await store.health()
    if args.json:
        print_json({"database": name, **health.model_dump(mode="json")})
    else:
        counts = ", ".join(f"{n} {state}" for state, n in health.tasks_by_state.items())
        verdict = "ok" if not health.problems else f"{len(health.problems)} problem(s)"
        print(f"{name}: {verdict}")
        for problem in health.problems:
            print(f"  problem: {problem}")
        print(f"  schema version {health.schema_version} of {health.latest_version}")
        print(f"  tasks: {counts or 'none'}; runs held by a worker: {health.leases}")
    return EXIT_FAILED if health.problems else EXIT_OK


async def collect_garbage(args: DbArgs) -> int:
    """Purge expired tasks now (a server or worker also does it every minute)."""
    name = describe_database(args.db)
    async with open_store(args.db) as store:
        purged = await TaskManager(store).purge_expired()
    return show(
        args.json, {"database": name, "purged": purged}, f"{name}: deleted {purged} expired task(s)"
    )
