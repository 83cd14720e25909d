"""Streamable HTTP for the TaskServer: bearer tokens, per-principal tasks and limits."""

from taskloom.server.http.service import HttpService
from taskloom.server.http.settings import HttpSettings
from taskloom.server.http.tokens import parse_tokens

__all__ = ("HttpService", "HttpSettings", "parse_tokens")
