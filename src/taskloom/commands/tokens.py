"""``taskloom tokens create|list|revoke``: the access tokens of the HTTP endpoint.

``create`` prints the token once (it is stored only as a hash); ``list`` never shows a
secret; ``revoke`` holds from the server's next request (ADR 0028).
"""

import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from taskloom.commands.arguments import DbArgs, TokenArgs, TokenCreateArgs
from taskloom.commands.base import EXIT_OK, CommandError
from taskloom.commands.common import open_store, print_json, show
from taskloom.engine.scopes import Scopes
from taskloom.engine.tokens import TokenRecord, mint

DEFAULT_EXPIRY: Final = "90d"
_DURATION: Final = re.compile(r"^(\d+)([smhd])$")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def lifetime(text: str) -> timedelta | None:
    """A ``--expires`` value as a duration (``None``: never).

    Raises:
        CommandError: not ``N[smhd]`` with N > 0, nor ``never``.
    """
    if text == "never":
        return None
    match = _DURATION.match(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise CommandError(
            f"--expires wants N followed by s, m, h or d (e.g. 30d), or never: {text!r}"
        )
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


async def create_token(args: TokenCreateArgs) -> int:
    """Store a new token and print it: the only time its secret is shown."""
    try:
        scopes = Scopes.parse(args.scope)
        token, record = mint(
            args.principal, now=datetime.now(UTC), expires_in=lifetime(args.expires), scopes=scopes
        )
    except ValueError as error:
        raise CommandError(str(error)) from error
    async with open_store(args.db, create=True) as store:
        await store.add_token(record)
    if args.json:
        print_json({**_json(record, record.created_at), "token": token})
    else:
        print(token)
        print(
            f"token {record.id} for {record.principal} ({_scopes(record)}), "
            f"{_expiry(record)}: it is shown only this once",
            file=sys.stderr,
        )
    return EXIT_OK


async def list_tokens(args: DbArgs) -> int:
    """Every token, oldest first, without secrets."""
    async with open_store(args.db, read_only=True) as store:
        records = await store.list_tokens()
    now = datetime.now(UTC)
    if args.json:
        print_json([_json(record, now) for record in records])
        return EXIT_OK
    for record in records:
        print(
            f"{record.id}  {record.principal}  {_scopes(record)}  {_expiry(record)}  "
            f"{record.state(now)}"
        )
    return EXIT_OK


async def revoke_token(args: TokenArgs) -> int:
    """Revoke a token by id; revoking twice is not an error."""
    async with open_store(args.db) as store:
        record = await store.revoke_token(args.id, datetime.now(UTC))
    if record is None:
        raise CommandError(f"no token with id {args.id!r} (see taskloom tokens list)")
    return show(
        args.json,
        _json(record, datetime.now(UTC)),
        f"token {record.id} of {record.principal} is revoked",
    )


def _json(record: TokenRecord, now: datetime) -> dict[str, Any]:
    return {
        "id": record.id,
        "principal": record.principal,
        "scopes": list(record.scopes),
        "created_at": record.created_at.isoformat(),
        "expires_at": record.expires_at.isoformat() if record.expires_at else None,
        "revoked_at": record.revoked_at.isoformat() if record.revoked_at else None,
        "state": str(record.state(now)),
    }


def _scopes(record: TokenRecord) -> str:
    return " ".join(record.scopes) or "all scopes"


def _expiry(record: TokenRecord) -> str:
    if record.expires_at is None:
        return "never expires"
    return f"expires {record.expires_at.isoformat(timespec='seconds')}"
