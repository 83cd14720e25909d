"""The settings ``taskloom serve`` builds from its flags (see docs/server.md).

Which flag fills which field is in :mod:`taskloom.commands.setting_table`; a setting that
neither its flag, nor its variable, nor the project file gives has the table's default,
which is the field's (a ``None`` leaves the field at its model's default). Tokens are
read from ``TASKLOOM_TOKENS`` or a file (``principal:token`` entries), never from the
command line, where other users could see them. ``--oauth-issuer`` and ``--oauth-audience`` accept JWT
access tokens of an OAuth authorization server as well.
"""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from taskloom.commands.base import CommandError
from taskloom.commands.setting import Values
from taskloom.commands.setting_table import HTTP, TOKENS_FILE, filling

if TYPE_CHECKING:
    from pydantic import ValidationError

    from taskloom.server import ServerSettings
    from taskloom.server.http import HttpSettings, OAuthSettings


def given_fields(model: str, values: Values) -> dict[str, Any]:
    """The fields of *model* (``ServerSettings``) that the flag *values* set directly
    (a ``None`` sets none)."""
    fields: dict[str, Any] = {}
    for setting, _ in filling(model):
        field = setting.field
        if field is not None and values.get(setting.name) is not None:
            fields[field[1]] = setting.value(values[setting.name])
    return fields


def server_settings(values: Values) -> "ServerSettings":
    """The server settings the flags ask for; a mistake is a usage error naming it."""
    from pydantic import ValidationError

    from taskloom.server import ServerSettings

    try:
        return ServerSettings(**given_fields("ServerSettings", values))
    except ValidationError as error:
        _invalid(error)


def http_settings(values: Values, env: Mapping[str, str] = os.environ) -> "HttpSettings | None":
    """The HTTP settings the flags ask for (``None``: serve stdio); a mistake is a usage
    error naming it (never a token)."""
    address, tokens_file = values.of(HTTP), values.of(TOKENS_FILE)
    if address is None:
        return None
    from pydantic import ValidationError

    from taskloom.server.http import HttpSettings, parse_tokens  # stdio loads no HTTP (ADR 0071)

    host, _, port = str(address).rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise CommandError(f"--http wants HOST:PORT, e.g. 127.0.0.1:8765, not {address!r}")
    try:
        tokens = parse_tokens(env.get("TASKLOOM_TOKENS", ""), source="TASKLOOM_TOKENS")
        if tokens_file is not None:
            text = Path(tokens_file).read_text(encoding="utf-8")
            tokens |= parse_tokens(text, source=str(tokens_file))
        return HttpSettings(
            host=host,
            port=int(port),
            tokens=tokens,
            oauth=_oauth_settings(values),
            stored_tokens=True,
            **given_fields("HttpSettings", values),
        )
    except OSError as error:
        raise CommandError(
            f"cannot read the tokens file: {error.strerror}: {tokens_file}"
        ) from None
    except ValidationError as error:
        _invalid(error)
    except ValueError as error:
        raise CommandError(str(error)) from None


def _oauth_settings(values: Values) -> "OAuthSettings | None":
    fields = given_fields("OAuthSettings", values)
    if "issuer" not in fields and "audience" not in fields:
        return None
    if "issuer" not in fields or "audience" not in fields:
        raise CommandError("OAuth needs both --oauth-issuer and --oauth-audience")
    from taskloom.server.http import OAuthSettings
    from taskloom.server.http.oauth_extra import require_oauth

    require_oauth()  # MissingExtraError: one line naming the extra
    return OAuthSettings(**fields)


def _invalid(error: "ValidationError") -> NoReturn:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    message = str(problem["msg"]).removeprefix("Value error, ")
    raise CommandError(f"{where}: {message}" if where else message) from None
