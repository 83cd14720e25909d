"""Token transactions of the PostgreSQL store (``engine.tokens.TokenStore``)."""

import json
from datetime import datetime

from taskloom.engine.tokens import TokenRecord
from taskloom.persistence.postgres.driver import Connection

_COLUMNS = "id, principal, hash, scopes, created_at, expires_at, revoked_at"


async def add_token(record: TokenRecord, connection: Connection) -> None:
    """See :meth:`taskloom.engine.tokens.TokenStore.add_token`."""
    await connection.execute(
        f"INSERT INTO tokens ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (
            record.id,
            record.principal,
            record.digest,
            json.dumps(list(record.scopes)),
            record.created_at,
            record.expires_at,
            record.revoked_at,
        ),
    )


async def find_token(token_id: str, connection: Connection) -> TokenRecord | None:
    """See :meth:`taskloom.engine.tokens.TokenStore.find_token`."""
    cursor = await connection.execute(f"SELECT {_COLUMNS} FROM tokens WHERE id = %s", (token_id,))
    row = await cursor.fetchone()
    return _record(row) if row is not None else None


async def find_tokens(token_ids: list[str], connection: Connection) -> list[TokenRecord]:
    """See :meth:`taskloom.engine.tokens.TokenStore.find_tokens`."""
    cursor = await connection.execute(
        f"SELECT {_COLUMNS} FROM tokens WHERE id = ANY(%s)", (token_ids,)
    )
    return [_record(row) for row in await cursor.fetchall()]


async def list_tokens(connection: Connection) -> list[TokenRecord]:
    """See :meth:`taskloom.engine.tokens.TokenStore.list_tokens`."""
    cursor = await connection.execute(f"SELECT {_COLUMNS} FROM tokens ORDER BY created_at, id")
    return [_record(row) for row in await cursor.fetchall()]


async def revoke_token(token_id: str, now: datetime, connection: Connection) -> TokenRecord | None:
    """See :meth:`taskloom.engine.tokens.TokenStore.revoke_token`."""
    await connection.execute(
        "UPDATE tokens SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL",
        (now, token_id),
    )
    return await find_token(token_id, connection)


def _record(row: tuple[object, ...]) -> TokenRecord:
    token_id, principal, digest, scopes, created, expires, revoked = row
    assert isinstance(created, datetime)
    assert expires is None or isinstance(expires, datetime)
    assert revoked is None or isinstance(revoked, datetime)
    return TokenRecord(
        id=str(token_id),
        principal=str(principal),
        digest=str(digest),
        scopes=tuple(json.loads(str(scopes))),
        created_at=created,
        expires_at=expires,
        revoked_at=revoked,
    )
