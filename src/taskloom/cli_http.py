"""The ``serve`` flags for Streamable HTTP, bearer tokens and limits (see docs/server.md).

Tokens are read from ``TASKLOOM_TOKENS`` or a file (``principal:token`` entries), never
from the command line, where other users could see them. ``--oauth-issuer`` and
``--oauth-audience`` accept JWT access tokens of an OAuth authorization server as well.
"""

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from taskloom.engine.errors import MissingExtraError
from taskloom.server import ServerSettings
from taskloom.server.http import HttpSettings, OAuthSettings, parse_tokens

_DEFAULTS = HttpSettings()
_OAUTH_FIELDS = OAuthSettings.model_fields
_SERVER_DEFAULTS = ServerSettings()


def add_http_options(serve: argparse.ArgumentParser, env: Mapping[str, str] = os.environ) -> None:
    """Add ``--http``, ``--tokens-file``, ``--max-body-bytes``, ``--max-result-bytes``,
    ``--plain-wait-s`` and ``--rate-limit`` to the ``serve`` parser."""
    serve.add_argument(
        "--http",
        default=env.get("TASKLOOM_HTTP") or None,
        metavar="HOST:PORT",
        help="serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio (env TASKLOOM_HTTP)",
    )
    serve.add_argument(
        "--tokens-file",
        type=Path,
        default=env.get("TASKLOOM_TOKENS_FILE") or None,
        metavar="PATH",
        help="bearer tokens, one 'principal:token' a line (env TASKLOOM_TOKENS_FILE; "
        "TASKLOOM_TOKENS holds such entries comma-separated)",
    )
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        default=env.get("TASKLOOM_MAX_BODY_BYTES") or _DEFAULTS.max_body_bytes,
        metavar="N",
        help="largest HTTP request body (env TASKLOOM_MAX_BODY_BYTES; default %(default)s)",
    )
    serve.add_argument(
        "--max-result-bytes",
        type=int,
        default=env.get("TASKLOOM_MAX_RESULT_BYTES") or _SERVER_DEFAULTS.max_result_bytes,
        metavar="N",
        help="largest result, as JSON (env TASKLOOM_MAX_RESULT_BYTES; default %(default)s; "
        "0: no limit)",
    )
    serve.add_argument(
        "--plain-wait-s",
        type=float,
        default=env.get("TASKLOOM_PLAIN_WAIT_S") or _SERVER_DEFAULTS.plain_wait_s,
        metavar="SECONDS",
        help="how long a plain tools/call waits before answering that its task goes on "
        "(env TASKLOOM_PLAIN_WAIT_S; default %(default)s; 0: until the task ends)",
    )
    serve.add_argument(
        "--rate-limit",
        type=float,
        default=env.get("TASKLOOM_RATE_LIMIT") or _DEFAULTS.rate_per_minute,
        metavar="PER_MINUTE",
        help="HTTP requests a minute per principal (env TASKLOOM_RATE_LIMIT; "
        "default %(default)s; 0: no limit)",
    )
    _add_oauth_options(serve, env)


def _add_oauth_options(serve: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    oauth = serve.add_argument_group("OAuth (JWT access tokens of an authorization server)")
    oauth.add_argument(
        "--oauth-issuer",
        default=env.get("TASKLOOM_OAUTH_ISSUER") or None,
        metavar="URL",
        help="accept JWTs of this issuer (its exact iss; env TASKLOOM_OAUTH_ISSUER); "
        "needs --oauth-audience",
    )
    oauth.add_argument(
        "--oauth-audience",
        default=env.get("TASKLOOM_OAUTH_AUDIENCE") or None,
        metavar="URL",
        help="this endpoint's public URL, e.g. https://mcp.example.com/mcp: the aud tokens "
        "must carry and the resource of its metadata (env TASKLOOM_OAUTH_AUDIENCE)",
    )
    oauth.add_argument(
        "--oauth-jwks-url",
        default=env.get("TASKLOOM_OAUTH_JWKS_URL") or None,
        metavar="URL",
        help="the issuer's keys (env TASKLOOM_OAUTH_JWKS_URL; default: the jwks_uri of "
        "the issuer's metadata)",
    )
    oauth.add_argument(
        "--oauth-algorithms",
        default=env.get("TASKLOOM_OAUTH_ALGORITHMS")
        or ",".join(_OAUTH_FIELDS["algorithms"].default),
        metavar="ALG,...",
        help="signature algorithms accepted, public-key ones only "
        "(env TASKLOOM_OAUTH_ALGORITHMS; default %(default)s)",
    )
    oauth.add_argument(
        "--oauth-leeway-s",
        type=float,
        default=env.get("TASKLOOM_OAUTH_LEEWAY_S") or _OAUTH_FIELDS["leeway_s"].default,
        metavar="SECONDS",
        help="clock skew allowed on exp, nbf and iat (env TASKLOOM_OAUTH_LEEWAY_S; "
        "default %(default)s)",
    )
    oauth.add_argument(
        "--oauth-scopes",
        default=env.get("TASKLOOM_OAUTH_SCOPES") or "",
        metavar="SCOPE,...",
        help="scopes every token must carry (env TASKLOOM_OAUTH_SCOPES; default none)",
    )


def server_settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ServerSettings:
    """The server settings the flags ask for; a mistake is a usage error naming it."""
    try:
        return ServerSettings(
            max_result_bytes=int(args.max_result_bytes) or None,
            plain_wait_s=float(args.plain_wait_s) or None,
        )
    except ValidationError as error:
        _invalid(parser, error)


def http_settings(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    env: Mapping[str, str] = os.environ,
) -> HttpSettings | None:
    """The HTTP settings the flags ask for (``None``: serve stdio); a mistake is a usage
    error naming it (never a token)."""
    if args.http is None:
        return None
    host, _, port = str(args.http).rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        parser.error(f"--http wants HOST:PORT, e.g. 127.0.0.1:8765, not {args.http!r}")
    try:
        tokens = parse_tokens(env.get("TASKLOOM_TOKENS", ""), source="TASKLOOM_TOKENS")
        if args.tokens_file is not None:
            text = Path(args.tokens_file).read_text(encoding="utf-8")
            tokens |= parse_tokens(text, source=str(args.tokens_file))
        return HttpSettings(
            host=host,
            port=int(port),
            tokens=tokens,
            oauth=_oauth_settings(parser, args),
            stored_tokens=True,
            max_body_bytes=int(args.max_body_bytes),
            rate_per_minute=float(args.rate_limit) or None,
        )
    except OSError as error:
        parser.error(f"cannot read the tokens file: {error.strerror}: {args.tokens_file}")
    except ValidationError as error:
        _invalid(parser, error)
    except ValueError as error:
        parser.error(str(error))


def _oauth_settings(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> OAuthSettings | None:
    if args.oauth_issuer is None and args.oauth_audience is None:
        return None
    if args.oauth_issuer is None or args.oauth_audience is None:
        parser.error("OAuth needs both --oauth-issuer and --oauth-audience")
    try:
        from taskloom.server.http.oauth_extra import require_oauth

        require_oauth()
    except MissingExtraError as error:
        parser.error(str(error))
    return OAuthSettings(
        issuer=args.oauth_issuer,
        audience=args.oauth_audience,
        jwks_url=args.oauth_jwks_url,
        algorithms=tuple(_split(args.oauth_algorithms)),
        leeway_s=float(args.oauth_leeway_s),
        scopes=tuple(_split(args.oauth_scopes)),
    )


def _split(value: str) -> list[str]:
    return [part for part in value.replace(",", " ").split() if part]


def _invalid(parser: argparse.ArgumentParser, error: ValidationError) -> NoReturn:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    message = str(problem["msg"]).removeprefix("Value error, ")
    parser.error(f"{where}: {message}" if where else message)
