-- taskloom schema 5: access tokens (ADR 0028). A token is `tl_<id>_<secret>`; only the
-- SHA-256 of its secret is kept. Revocation sets `revoked_at`; rows are never reused.
CREATE TABLE tokens (
    id         TEXT    NOT NULL PRIMARY KEY,
    principal  TEXT    NOT NULL,
    hash       TEXT    NOT NULL,              -- SHA-256 of the secret, hex
    scopes     TEXT    NOT NULL DEFAULT '[]', -- JSON array of scopes ("read", "workflows:a,b")
    created_at INTEGER NOT NULL,              -- microseconds since the Unix epoch, UTC
    expires_at INTEGER,                       -- NULL: never
    revoked_at INTEGER                        -- NULL: not revoked
) WITHOUT ROWID;
