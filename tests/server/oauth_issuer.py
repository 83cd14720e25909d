"""A test OAuth issuer on 127.0.0.1: its own keys, its metadata and JWK Set, and tokens."""

import base64
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

RESOURCE = "https://mcp.test/mcp"
"""The endpoint's public URL in these tests (the resource and every token's audience)."""

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


@dataclass
class SigningKey:
    kid: str
    private: PrivateKey
    algorithm: str

    def jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            found: dict[str, Any] = RSAAlgorithm.to_jwk(public, as_dict=True)
        else:
            found = ECAlgorithm.to_jwk(public, as_dict=True)
        return {**found, "kid": self.kid, "alg": self.algorithm, "use": "sig"}


def rsa_key(kid: str) -> SigningKey:
    return SigningKey(kid, rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")


def ec_key(kid: str) -> SigningKey:
    return SigningKey(kid, ec.generate_private_key(ec.SECP256R1()), "ES256")


@dataclass
class Issuer:
    """An authorization server's published side; ``url`` is set once it listens."""

    keys: list[SigningKey]
    url: str = ""
    jwks_fetches: int = 0
    published: list[SigningKey] = field(default_factory=list)
    outage: str | None = None
    """``"hang"``: the JWK Set never answers (until the issuer stops); ``"500"``: it
    answers HTTP 500; ``"endless"``: it sends a body that never ends; ``None``: it works."""
    stopping: anyio.Event = field(default_factory=anyio.Event)

    def __post_init__(self) -> None:
        self.published = list(self.keys)

    def token(
        self,
        sub: str = "ann",
        *,
        key: SigningKey | None = None,
        lifetime_s: float = 300,
        **claims: Any,
    ) -> str:
        """A token signed by *key* (the first key by default); *claims* override."""
        signer = key or self.keys[0]
        now = int(time.time())
        payload = {
            "iss": self.url,
            "aud": RESOURCE,
            "sub": sub,
            "iat": now,
            "exp": int(now + lifetime_s),
            "client_id": "test-client",
            **claims,
        }
        headers = {"kid": signer.kid}
        return jwt.encode(payload, signer.private, algorithm=signer.algorithm, headers=headers)

    def unsigned_token(self, sub: str = "ann") -> str:
        """The same claims, with ``alg: none`` and no signature."""
        header = {"alg": "none", "typ": "JWT", "kid": self.keys[0].kid}
        now = int(time.time())
        payload = {"iss": self.url, "aud": RESOURCE, "sub": sub, "iat": now, "exp": now + 300}
        return f"{_b64(header)}.{_b64(payload)}."

    def app(self) -> Starlette:
        async def metadata(request: Request) -> JSONResponse:
            return JSONResponse({
                "issuer": self.url,
                "jwks_uri": f"{self.url}/jwks",
                "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token",
                "response_types_supported": ["code"],
            })  # fmt: skip

        async def jwks(request: Request) -> Response:
            self.jwks_fetches += 1
            if self.outage == "hang":
                await self.stopping.wait()
            if self.outage == "500":
                return JSONResponse({"error": "down"}, status_code=500)
            if self.outage == "endless":
                return StreamingResponse(_endless(self.stopping), media_type="application/json")
            return JSONResponse({"keys": [key.jwk() for key in self.published]})

        return Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", metadata),
                Route("/jwks", jwks),
            ]
        )


async def _endless(stopping: anyio.Event) -> AsyncIterator[bytes]:
    yield b'{"keys": ["'
    while not stopping.is_set():
        yield b"x" * 65536
        await anyio.lowlevel.checkpoint()


def _b64(part: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode()


@asynccontextmanager
async def issuing(issuer: Issuer) -> AsyncIterator[Issuer]:
    """Serve *issuer* on 127.0.0.1 (a free port) while inside."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # listening now: connections wait in the backlog until uvicorn serves
    issuer.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(issuer.app(), lifespan="off", log_level="warning", log_config=None)
    server = uvicorn.Server(config)
    try:
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(server.serve, [sock])
            try:
                yield issuer
            finally:
                issuer.stopping.set()
                server.should_exit = True
    finally:
        sock.close()
