"""What both SQL stores share (ADR 0043): the store rules as SQL, written once.

Each rule is a *script*, a generator that yields statements and receives their results
(:mod:`.script`); the SQLite store runs scripts in its writer's thread, the PostgreSQL
store on an async connection. What differs between the two is a :class:`.dialect.Dialect`:
placeholders, the time representation, row locks and whether statements may be fused
into one round trip.
"""
