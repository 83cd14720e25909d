"""The ``serve`` flags for Streamable HTTP, bearer tokens and limits (see docs/server.md).

Tokens are read from ``TASKLOOM_TOKENS`` or a file (``principal:token`` entries), never
from the command line, where other users could see them. ``--oauth-issuer`` and
``--oauth-audience`` accept JWT access tokens of an OAuth authorization server as well.
Each flag also reads its ``TASKLOOM_*`` variable (click does), then the project file's
``[serve]`` table.
"""

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

import click

from taskloom.commands.base import Args, CommandError
from taskloom.commands.options import from_project

if TYPE_CHECKING:
    from pydantic import ValidationError

    from taskloom.server import ServerSettings
    from taskloom.server.http import HttpSettings, OAuthSettings

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024
DEFAULT_MAX_RESULT_BYTES: Final = 16 * 1024 * 1024
DEFAULT_PLAIN_WAIT_S: Final = 45.0
DEFAULT_RATE_PER_MINUTE: Final = 600.0
DEFAULT_OAUTH_ALGORITHMS: Final = "RS256,ES256"
DEFAULT_OAUTH_LEEWAY_S: Final = 30.0
DEFAULT_MAX_UNFINISHED_PER_PRINCIPAL: Final = 1_000
DEFAULT_MAX_SESSIONS_PER_PRINCIPAL: Final = 100
DEFAULT_SESSION_IDLE_S: Final = 300.0
DEFAULT_HEADER_TIMEOUT_S: Final = 10.0
"""The defaults of ``HttpSettings``, ``ServerSettings`` and ``OAuthSettings`` (a test checks
them: the settings are not imported here, so ``--help`` loads no server)."""


def _option(name: str, help: str, *, default: Any = None, **kwargs: Any) -> Callable[[F], F]:
    dest = name.removeprefix("--").replace("-", "_")
    variable = "TASKLOOM_" + dest.upper()
    return click.option(
        name,
        dest,
        envvar=variable,
        default=from_project(dest, default),
        help=f"{help} (env {variable}"
        + (f"; default {default}" if default is not None else "")
        + ")",
        **kwargs,
    )


def http_options(command: F) -> F:
    """Add ``--http``, ``--tokens-file``, ``--max-body-bytes``, ``--max-result-bytes``,
    ``--plain-wait-s``, ``--linger/--no-linger``, ``--rate-limit``, the per-principal quotas, the session and header
    timeouts and the OAuth flags to the ``serve`` command."""
    decorators = [
        _option(
            "--http",
            "serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio",
            metavar="HOST:PORT",
        ),
        _option(
            "--tokens-file",
            "bearer tokens, one 'principal:token' a line (TASKLOOM_TOKENS holds such "
            "entries comma-separated)",
            metavar="PATH",
        ),
        _option(
            "--max-body-bytes",
            "largest HTTP request body",
            default=DEFAULT_MAX_BODY_BYTES,
            type=int,
            metavar="N",
        ),
        _option(
            "--max-result-bytes",
            "largest result, as JSON; 0: no limit",
            default=DEFAULT_MAX_RESULT_BYTES,
            type=int,
            metavar="N",
        ),
        _option(
            "--plain-wait-s",
            "how long a plain tools/call waits before answering that its task goes on; "
            "0: until the task ends",
            default=DEFAULT_PLAIN_WAIT_S,
            type=float,
            metavar="SECONDS",
        ),
        click.option(
            "--linger/--no-linger",
            "linger",
            envvar="TASKLOOM_LINGER",
            default=from_project("linger", True),
            help="when a stdio server's host leaves, a background worker finishes its "
            "unfinished tasks (env TASKLOOM_LINGER; default on)",
        ),
        _option(
            "--rate-limit",
            "HTTP requests a minute per principal; 0: no limit",
            default=DEFAULT_RATE_PER_MINUTE,
            type=float,
            metavar="PER_MINUTE",
        ),
        _option(
            "--max-unfinished-per-principal",
            "unfinished tasks (queued, running, waiting for input) one named principal "
            "may have; more are refused at create; 0: no limit",
            default=DEFAULT_MAX_UNFINISHED_PER_PRINCIPAL,
            type=int,
            metavar="N",
        ),
        _option(
            "--max-sessions-per-principal",
            "open HTTP sessions one named principal may hold",
            default=DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
            type=int,
            metavar="N",
        ),
        _option(
            "--session-idle-s",
            "an HTTP session with no request in flight for this long is closed",
            default=DEFAULT_SESSION_IDLE_S,
            type=float,
            metavar="SECONDS",
        ),
        _option(
            "--header-timeout-s",
            "a connection whose request head has not arrived within this is closed",
            default=DEFAULT_HEADER_TIMEOUT_S,
            type=float,
            metavar="SECONDS",
        ),
        _option(
            "--oauth-issuer",
            "accept JWT access tokens of this issuer (its exact iss); needs --oauth-audience",
            metavar="URL",
        ),
        _option(
            "--oauth-audience",
            "this endpoint's public URL, e.g. https://mcp.example.com/mcp: the aud tokens "
            "must carry and the resource of its metadata",
            metavar="URL",
        ),
        _option(
            "--oauth-jwks-url",
            "the issuer's keys (default: the jwks_uri of the issuer's metadata)",
            metavar="URL",
        ),
        _option(
            "--oauth-algorithms",
            "signature algorithms accepted, public-key ones only",
            default=DEFAULT_OAUTH_ALGORITHMS,
            metavar="ALG,...",
        ),
        _option(
            "--oauth-leeway-s",
            "clock skew allowed on exp, nbf and iat",
            default=DEFAULT_OAUTH_LEEWAY_S,
            type=float,
            metavar="SECONDS",
        ),
        _option(
            "--oauth-scopes",
            "scopes every token must carry (default none)",
            metavar="SCOPE,...",
        ),
    ]
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


def server_settings(args: Args) -> "ServerSettings":
    """The server settings the flags ask for; a mistake is a usage error naming it."""
    from pydantic import ValidationError

    from taskloom.server import ServerSettings

    try:
        return ServerSettings(
            max_result_bytes=int(args.max_result_bytes) or None,
            plain_wait_s=float(args.plain_wait_s) or None,
            linger=bool(args.linger),
            max_unfinished_per_principal=int(args.max_unfinished_per_principal) or None,
        )
    except ValidationError as error:
        _invalid(error)


def http_settings(args: Args, env: Mapping[str, str] = os.environ) -> "HttpSettings | None":
    """The HTTP settings the flags ask for (``None``: serve stdio); a mistake is a usage
    error naming it (never a token)."""
    from pydantic import ValidationError

    from taskloom.server.http import HttpSettings, parse_tokens

    if args.http is None:
        return None
    host, _, port = str(args.http).rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise CommandError(f"--http wants HOST:PORT, e.g. 127.0.0.1:8765, not {args.http!r}")
    try:
        tokens = parse_tokens(env.get("TASKLOOM_TOKENS", ""), source="TASKLOOM_TOKENS")
        if args.tokens_file is not None:
            text = Path(args.tokens_file).read_text(encoding="utf-8")
            tokens |= parse_tokens(text, source=str(args.tokens_file))
        return HttpSettings(
            host=host,
            port=int(port),
            tokens=tokens,
            oauth=_oauth_settings(args),
            stored_tokens=True,
            max_body_bytes=int(args.max_body_bytes),
            rate_per_minute=float(args.rate_limit) or None,
            max_sessions_per_principal=int(args.max_sessions_per_principal),
            session_idle_s=float(args.session_idle_s),
            header_timeout_s=float(args.header_timeout_s),
        )
    except OSError as error:
        raise CommandError(
            f"cannot read the tokens file: {error.strerror}: {args.tokens_file}"
        ) from None
    except ValidationError as error:
        _invalid(error)
    except ValueError as error:
        raise CommandError(str(error)) from None


def _oauth_settings(args: Args) -> "OAuthSettings | None":
    if args.oauth_issuer is None and args.oauth_audience is None:
        return None
    if args.oauth_issuer is None or args.oauth_audience is None:
        raise CommandError("OAuth needs both --oauth-issuer and --oauth-audience")
    from taskloom.server.http import OAuthSettings
    from taskloom.server.http.oauth_extra import require_oauth

    require_oauth()  # MissingExtraError: one line naming the extra
    return OAuthSettings(
        issuer=args.oauth_issuer,
        audience=args.oauth_audience,
        jwks_url=args.oauth_jwks_url,
        algorithms=tuple(_split(args.oauth_algorithms)),
        leeway_s=float(args.oauth_leeway_s),
        scopes=tuple(_split(args.oauth_scopes or "")),
    )


def _split(value: str) -> list[str]:
    return [part for part in value.replace(",", " ").split() if part]


def _invalid(error: "ValidationError") -> NoReturn:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    message = str(problem["msg"]).removeprefix("Value error, ")
    raise CommandError(f"{where}: {message}" if where else message) from None
