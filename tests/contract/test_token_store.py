"""The token port on every store: stored without its secret, found by id, revoked once."""

from datetime import UTC, datetime, timedelta
from typing import cast

from taskloom.engine.ports import TaskStore
from taskloom.engine.scopes import Grant, Scopes
from taskloom.engine.tokens import TokenState, TokenStore, TokenVerifier, digest, mint
from taskloom.testing import FakeClock

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


async def test_a_token_is_stored_as_a_hash_and_read_back(store: TaskStore) -> None:
    tokens = cast(TokenStore, store)
    token, record = mint(
        "ann", now=NOW, expires_in=timedelta(days=30), scopes=Scopes.parse(["read"])
    )
    await tokens.add_token(record)
    found = await tokens.find_token(record.id)
    assert found == record
    secret = token.split("_", 2)[2]
    assert found is not None
    assert found.digest == digest(secret) != secret
    assert [each.id for each in await tokens.list_tokens()] == [record.id]
    assert await tokens.find_token("0" * 12) is None


async def test_revoking_keeps_the_first_time_and_an_unknown_id_is_none(store: TaskStore) -> None:
    tokens = cast(TokenStore, store)
    _, record = mint("ann", now=NOW)
    await tokens.add_token(record)
    first = await tokens.revoke_token(record.id, NOW + timedelta(minutes=1))
    again = await tokens.revoke_token(record.id, NOW + timedelta(minutes=2))
    assert first is not None
    assert first.revoked_at == NOW + timedelta(minutes=1)
    assert again == first
    assert first.state(NOW + timedelta(hours=1)) is TokenState.REVOKED
    assert await tokens.revoke_token("0" * 12, NOW) is None


async def test_the_verifier_accepts_only_an_active_token_with_its_secret(
    store: TaskStore,
) -> None:
    tokens = cast(TokenStore, store)
    clock = FakeClock(NOW)
    token, record = mint("ann", now=NOW, expires_in=timedelta(hours=1))
    await tokens.add_token(record)
    verifier = TokenVerifier(tokens, clock)
    assert await verifier.grant(token) == Grant("ann", Scopes())
    assert await verifier.grant(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert await verifier.grant("tl_" + "0" * 12 + "_whatever") is None
    assert await verifier.grant("not-a-token") is None
    await tokens.revoke_token(record.id, NOW)
    assert await verifier.grant(token) is None


async def test_a_token_expires_at_its_expiry(store: TaskStore) -> None:
    tokens = cast(TokenStore, store)
    clock = FakeClock(NOW)
    token, record = mint("ann", now=NOW, expires_in=timedelta(hours=1))
    await tokens.add_token(record)
    verifier = TokenVerifier(tokens, clock)
    clock.advance(3599)
    assert await verifier.grant(token) is not None
    clock.advance(1)
    assert await verifier.grant(token) is None


async def test_the_tokens_in_use_are_read_back_in_one_call_and_ended_ones_named(
    store: TaskStore,
) -> None:
    tokens = cast(TokenStore, store)
    clock = FakeClock(NOW)
    _, kept = mint("ann", now=NOW)
    _, revoked = mint("ann", now=NOW)
    _, expiring = mint("bob", now=NOW, expires_in=timedelta(minutes=5))
    for record in (kept, revoked, expiring):
        await tokens.add_token(record)
    await tokens.revoke_token(revoked.id, NOW)
    wanted = [kept.id, revoked.id, "0" * 12]
    assert sorted(r.id for r in await tokens.find_tokens(wanted)) == sorted([kept.id, revoked.id])
    assert await tokens.find_tokens([]) == []
    verifier = TokenVerifier(tokens, clock)
    ids = [kept.id, revoked.id, expiring.id, "0" * 12]
    assert await verifier.ended(ids) == {
        revoked.id: TokenState.REVOKED,
        "0" * 12: TokenState.REVOKED,  # deleted: no longer accepted either
    }
    clock.advance(300)
    assert (await verifier.ended(ids))[expiring.id] is TokenState.EXPIRED
