"""``/metrics`` on an address of its own, for a process with no HTTP endpoint
(``taskloom worker --metrics HOST:PORT``; ADR 0034).

The server is ``prometheus_client``'s (a WSGI server in a daemon thread): it answers a
``GET`` on any path, ``/metrics`` included, with the text format, and asks for no token,
as exporters do; bind a loopback or private address. The metrics themselves are
thread-safe, so the engine counts on its event loop while the thread renders.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from threading import Thread
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from taskloom.engine.errors import InvalidRequestError

if TYPE_CHECKING:
    from taskloom.observability.metrics import Metrics


@dataclass(frozen=True)
class MetricsServer:
    """A running metrics server: where it listens, what it serves; :meth:`close` stops it."""

    host: str
    port: int
    metrics: "Metrics"
    _server: WSGIServer
    _thread: Thread

    @property
    def url(self) -> str:
        """The address to scrape."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def start_metrics_server(host: str, port: int, metrics: "Metrics") -> MetricsServer:
    """Serve *metrics* at ``http://HOST:PORT/metrics`` (port 0: any free port) until
    :meth:`MetricsServer.close`.

    Raises:
        InvalidRequestError: the address cannot be bound (in use, not this machine's).
    """
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as error:
        reason = error.strerror or str(error)
        raise InvalidRequestError(f"cannot serve metrics on {host}:{port}: {reason}") from error
    return MetricsServer(host, server.server_port, metrics, server, thread)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as ``(host, port)``.

    Raises:
        InvalidRequestError: it is not HOST:PORT with a port from 0 to 65535.
    """
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise InvalidRequestError(f"--metrics wants HOST:PORT, e.g. 127.0.0.1:9464, not {text!r}")
    return host, int(port)


@contextmanager
def metrics_endpoint(address: str | None) -> Iterator[MetricsServer | None]:
    """Fresh :class:`Metrics` served at *address* (``HOST:PORT``) while inside; ``None``
    and nothing served when *address* is ``None``.

    Raises:
        InvalidRequestError: *address* is not HOST:PORT, or cannot be bound.
    """
    if address is None:
        yield None
        return
    host, port = parse_address(address)
    from taskloom.observability.metrics import Metrics  # prometheus_client: only when asked

    server = start_metrics_server(host, port, Metrics())
    try:
        yield server
    finally:
        server.close()
