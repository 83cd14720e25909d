-- taskloom PostgreSQL schema 5: access tokens (ADR 0028). A token is `tl_<id>_<secret>`;
-- only the SHA-256 of its secret is kept. Revocation sets `revoked_at`.
CREATE TABLE tokens (
    id         text        NOT NULL PRIMARY KEY,
    principal  text        NOT NULL,
    hash       text        NOT NULL,               -- SHA-256 of the secret, hex
    scopes     text        NOT NULL DEFAULT '[]',  -- JSON array of scopes ("read", "workflows:a,b")
    created_at timestamptz NOT NULL,
    expires_at timestamptz,                        -- NULL: never
    revoked_at timestamptz                         -- NULL: not revoked
);
