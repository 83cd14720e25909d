"""Token transactions of the SQLite store (``engine.tokens.TokenStore``)."""

import json
import sqlite3
from datetime import datetime

from taskloom.engine.tokens import TokenRecord
from taskloom.persistence.sqlite import rows

_COLUMNS = "id, principal, hash, scopes, created_at, expires_at, revoked_at"


def add_token(raw: sqlite3.Connection, record: TokenRecord) -> None:
    """See :meth:`taskloom.engine.tokens.TokenStore.add_token`."""
    raw.execute(
        f"INSERT INTO tokens ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            record.id,
            record.principal,
            record.digest,
            json.dumps(list(record.scopes)),
            rows.micros(record.created_at),
            _micros(record.expires_at),
            _micros(record.revoked_at),
        ),
    )


def find_token(raw: sqlite3.Connection, token_id: str) -> TokenRecord | None:
    """See :meth:`taskloom.engine.tokens.TokenStore.find_token`."""
    row = raw.execute(f"SELECT {_COLUMNS} FROM tokens WHERE id = ?", (token_id,)).fetchone()
    return _record(row) if row is not None else None


def find_tokens(raw: sqlite3.Connection, token_ids: list[str]) -> list[TokenRecord]:
    """See :meth:`taskloom.engine.tokens.TokenStore.find_tokens`."""
    found = raw.execute(
        f"SELECT {_COLUMNS} FROM tokens WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(token_ids),),
    ).fetchall()
    return [_record(row) for row in found]


def list_tokens(raw: sqlite3.Connection) -> list[TokenRecord]:
    """See :meth:`taskloom.engine.tokens.TokenStore.list_tokens`."""
    found = raw.execute(f"SELECT {_COLUMNS} FROM tokens ORDER BY created_at, id").fetchall()
    return [_record(row) for row in found]


def revoke_token(raw: sqlite3.Connection, token_id: str, now: datetime) -> TokenRecord | None:
    """See :meth:`taskloom.engine.tokens.TokenStore.revoke_token`."""
    raw.execute(
        "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
        (rows.micros(now), token_id),
    )
    return find_token(raw, token_id)


def _micros(moment: datetime | None) -> int | None:
    return rows.micros(moment) if moment is not None else None


def _record(row: tuple[object, ...]) -> TokenRecord:
    token_id, principal, digest, scopes, created, expires, revoked = row
    return TokenRecord(
        id=str(token_id),
        principal=str(principal),
        digest=str(digest),
        scopes=tuple(json.loads(str(scopes))),
        created_at=rows.from_micros(int(str(created))),
        expires_at=rows.from_micros(int(str(expires))) if expires is not None else None,
        revoked_at=rows.from_micros(int(str(revoked))) if revoked is not None else None,
    )
