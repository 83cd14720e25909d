"""The ``serve`` flags for Streamable HTTP, bearer tokens and limits (see docs/server.md).

Tokens are read from ``TASKLOOM_TOKENS`` or a file (``principal:token`` entries), never
from the command line, where other users could see them.
"""

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from taskloom.server import ServerSettings
from taskloom.server.http import HttpSettings, parse_tokens

_DEFAULTS = HttpSettings()
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


def _invalid(parser: argparse.ArgumentParser, error: ValidationError) -> NoReturn:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    message = str(problem["msg"]).removeprefix("Value error, ")
    parser.error(f"{where}: {message}" if where else message)
