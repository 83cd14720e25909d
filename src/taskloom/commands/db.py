"""``taskloom db migrate|check|gc``: looking after the database file."""

import argparse
from typing import Any

from taskloom.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_db,
    add_json,
    open_store,
    print_json,
)
from taskloom.engine.manager import TaskManager


def register(commands: "argparse._SubParsersAction[Any]") -> None:
    """Add ``db`` to the command line."""
    group = commands.add_parser("db", help="create, upgrade, check and clean the database")
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    migrate = actions.add_parser(
        "migrate", help="create the database, or bring its schema up to date"
    )
    migrate.set_defaults(handler=migrate_database)
    check = actions.add_parser(
        "check", help="SQLite's integrity checks and what the file holds (exit 1 on a problem)"
    )
    check.set_defaults(handler=check_database)
    gc = actions.add_parser("gc", help="delete the tasks whose retention ran out")
    gc.set_defaults(handler=collect_garbage)
    for parser in (migrate, check, gc):
        add_db(parser)
        add_json(parser)


async def migrate_database(args: argparse.Namespace) -> int:
    """Open (creating or migrating) the file and say which schema version it has."""
    async with open_store(args.db, create=True) as store:
        health = await store.health()
    if args.json:
        print_json({"database": str(args.db), "schema_version": health.schema_version})
    else:
        print(f"{args.db}: schema version {health.schema_version} (the latest)")
    return EXIT_OK


async def check_database(args: argparse.Namespace) -> int:
    """Report problems (none, when healthy), the schema version and task counts."""
    async with open_store(args.db) as store:
        health = await store.health()
    if args.json:
        print_json({"database": str(args.db), **health.model_dump(mode="json")})
    else:
        counts = ", ".join(f"{n} {state}" for state, n in health.tasks_by_state.items())
        verdict = "ok" if not health.problems else f"{len(health.problems)} problem(s)"
        print(f"{args.db}: {verdict}")
        for problem in health.problems:
            print(f"  problem: {problem}")
        print(f"  schema version {health.schema_version} of {health.latest_version}")
        print(f"  tasks: {counts or 'none'}; runs held by a worker: {health.leases}")
    return EXIT_FAILED if health.problems else EXIT_OK


async def collect_garbage(args: argparse.Namespace) -> int:
    """Purge expired tasks now (a server or worker also does it every minute)."""
    async with open_store(args.db) as store:
        purged = await TaskManager(store).purge_expired()
    if args.json:
        print_json({"database": str(args.db), "purged": purged})
    else:
        print(f"{args.db}: deleted {purged} expired task(s)")
    return EXIT_OK
