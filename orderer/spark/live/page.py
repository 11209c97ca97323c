"""The live page's HTTP server (``evb spark-job --ui [HOST:]PORT``): the page, its script and
plotting library, and the board's documents as JSON. Read-only: GET and HEAD only, nothing
but the run's figures and histograms; anything else is 404 (or 501 for another method), never a
traceback.

Why the standard library's threading server: the page has a handful of readers (the people on
shift), every answer is bytes already rendered (:mod:`orderer.spark.live.board`), and the job
must not grow a web framework. It runs in daemon threads of the driver; the socket is bound
before Spark starts, so a port in use is one line and exit status 2, not a failure after the
JVM's start.

URLs: ``/`` the page; ``/static/NAME`` its files; ``/api/runs``; ``/api/runs/RUN`` a run's
index; ``/api/runs/RUN/histograms/NAME`` a histogram (RUN percent-encoded).
"""

from __future__ import annotations

import errno
import functools
import logging
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import unquote, urlsplit

from orderer.errors import ConfigError
from orderer.spark.live.board import Board

__all__ = ["DEFAULT_HOST", "LivePage", "parse_address"]

log = logging.getLogger("evb.spark.live")

DEFAULT_HOST = "127.0.0.1"
"""Loopback unless told otherwise: the page is for the people on shift, not the network."""

_STATIC = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "plotly-cartesian.min.js": "text/javascript; charset=utf-8",
    "plotly-LICENSE.txt": "text/plain; charset=utf-8",
}
_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    # plotly sets styles inline and draws a colour map as a data: image
    "Content-Security-Policy": (
        "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:"
    ),
    "Referrer-Policy": "no-referrer",
}


def parse_address(value: str) -> tuple[str, int]:
    """``[HOST:]PORT`` (an IPv6 host in brackets) as (host, port); a ConfigError naming
    ``--ui`` otherwise."""
    text = value.strip()
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError("--ui", value, "must be [HOST:]PORT with a port from 0 to 65535")
    return host, int(port)


@functools.cache
def _static(name: str) -> bytes:
    """A file of the page, read once (plotly's is 1.5 MB)."""
    return resources.files("orderer.spark.live").joinpath("static", name).read_bytes()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    board: Board


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "evb-live"

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        try:
            found = self._route(urlsplit(self.path).path)
        except Exception:  # a bug here must not show a traceback to a browser
            log.exception("live page: %s failed", self.path)
            found = (HTTPStatus.INTERNAL_SERVER_ERROR, "text/plain", b"internal error\n")
        status, kind, content = found
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(content)))
        self.send_header(
            "Cache-Control", "no-store" if kind.startswith("application") else "max-age=60"
        )
        for name, value in _HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(content)

    def _route(self, path: str) -> tuple[int, str, bytes]:
        board = self.server.board
        parts = [unquote(part) for part in path.split("/")[1:]]
        document: bytes | None = None
        if parts in ([""], ["index.html"]):
            return HTTPStatus.OK, "text/html; charset=utf-8", _static("index.html")
        if len(parts) == 2 and parts[0] == "static" and parts[1] in _STATIC:
            return HTTPStatus.OK, _STATIC[parts[1]], _static(parts[1])
        if parts == ["api", "runs"]:
            document = board.runs()
        elif len(parts) == 3 and parts[:2] == ["api", "runs"]:
            document = board.index(parts[2])
        elif len(parts) == 5 and parts[:2] == ["api", "runs"] and parts[3] == "histograms":
            document = board.histogram(parts[2], parts[4])
        if document is None:
            return HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n"
        return HTTPStatus.OK, "application/json", document


class LivePage:
    """The server, bound at once (a ConfigError naming ``--ui`` when it cannot be), serving
    once :meth:`start` ed."""

    def __init__(self, address: str, board: Board) -> None:
        host, port = parse_address(address)
        try:
            kind = _Server6 if ":" in host else _Server
            self._server: _Server = kind((host, port), _Handler)
        except OSError as error:
            why = "the port is in use" if error.errno == errno.EADDRINUSE else error.strerror
            raise ConfigError(
                "--ui", address, f"cannot serve the live page there: {why}"
            ) from error
        self._server.board = board
        self.board = board
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        """``HOST:PORT`` where it listens (the port chosen for port 0)."""
        host, port = self._server.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="evb-live-page", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()
