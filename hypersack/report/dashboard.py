"""``hypersack dashboard [STUDY]``: a local web page that follows a study store while it runs.

A stdlib ``ThreadingHTTPServer`` bound to 127.0.0.1 by default. It serves

- ``/``: the page (plotly.js and the report's script inline, so it needs no network);
- ``/api/studies``: the store's studies with their status and trial counts;
- ``/api/study?name=NAME``: the report's payload of one study (running trials included).

Who may read it: a request whose ``Host`` header is not a name of this machine's loopback (or
the bound address) is refused (403) while it listens on a loopback address, so a web page that
rebinds its own domain to 127.0.0.1 cannot read the store (DNS rebinding); bound to any other
address (``--host 0.0.0.0``) it requires a token, made at random and printed once in its URL
(``?token=...``, as Jupyter does): the first request with it sets a cookie that the page's API
requests carry; any request without it is refused (403). Started for a study
(``hypersack dashboard STUDY``), it serves that study only (``/api/studies`` lists it alone,
another name is a 404); started without one, it serves every study of the store, and says so.

Every API request opens the store READ-ONLY (``Storage(path, readonly=True)``: a ``mode=ro``
SQLite connection in WAL mode), reads and closes it. A WAL reader never takes the write lock,
so the study's driver never waits for the dashboard, let alone sees "database is locked"
(optuna-dashboard's #545); the test polls every 100 ms during a running study to show it.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from hypersack.errors import HyperSackError, StorageError, StudyNotFoundError
from hypersack.validation import check_integer

__all__ = ["Dashboard", "DEFAULT_HOST", "DEFAULT_PORT"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


class Dashboard:
    """The dashboard server for the store at ``storage``. ``port`` 0 picks a free port (see
    ``url``). ``serve_forever()`` blocks; ``start()`` serves on a daemon thread; ``close()``.
    ``study``: the one study it serves (None: every study of the store). ``token``: the
    secret every request must carry (see the module); None: a random one where ``host`` is not
    a loopback address, none on loopback (the Host check guards it)."""

    def __init__(self, storage: str | Path, *, study: str | None = None, host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT, poll_ms: int = 2000, token: str | None = None):
        check_integer("--port", port, low=0, high=65535)
        check_integer("--poll-ms", poll_ms, low=50, hint="(milliseconds)")
        from hypersack.report.html import dashboard_html
        self.storage = Path(storage)
        self.only = study
        self.loopback = _is_loopback(host)
        self.token = token if token is not None or self.loopback else secrets.token_urlsafe(24)
        self._page = dashboard_html(study, poll_ms).encode("utf-8")   # needs plotly: fails here
        handler = type("Handler", (_Handler,), {"dashboard": self})
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise HyperSackError(f"The dashboard cannot listen on {host}:{port} ({exc.strerror}); "
                                 "pick another --port") from None
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The page's address; with the token where one is required (print it once)."""
        host = self._server.server_address[0]
        name = host.decode() if isinstance(host, bytes) else host
        if ":" in name:
            name = f"[{name}]"
        return f"http://{name}:{self.port}/" + (f"?token={self.token}" if self.token else "")

    @property
    def cookie(self) -> str:
        """The name of the cookie that carries the token (one per port: two dashboards on one
        machine do not overwrite each other's)."""
        return f"hypersack-dashboard-{self.port}"

    def scope(self) -> str:
        """What it serves, in words (the command line prints it)."""
        if self.only is not None:
            return f"study {self.only!r} only"
        return "every study of the store (name a study to serve only that one)"

    def allows_host(self, header: str | None) -> bool:
        """Whether a request with this ``Host`` header may be served: on a loopback address,
        only a loopback name or the bound address; on another address any (the token guards
        it). No header: refused."""
        if not header:
            return False
        if not self.loopback:
            return True
        name = header.rsplit(":", 1)[0] if not header.endswith("]") else header
        if header.startswith("[") and "]" in header:
            name = header[1:header.index("]")]
        return name.lower() == "localhost" or _is_loopback(name)

    def accepts_token(self, given: str | None) -> bool:
        """Whether ``given`` is the token (always, where none is required)."""
        if self.token is None:
            return True
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.2)

    def serve_until_interrupted(self, ready: Callable[[], None] | None = None) -> None:
        """Serve in this thread until SIGINT or SIGTERM arrives, then close the server.

        Both signals are taken explicitly while it serves (their previous handlers come back
        after): a process started with SIGINT ignored (``hypersack dashboard &`` from a script,
        or from a test runner that runs in the background) inherits that ``SIG_IGN``, and Python
        then installs no KeyboardInterrupt handler, so Ctrl-C (``kill -INT``) would never stop
        it. ``ready`` (e.g. printing the URL) is called once they are taken, so a signal sent
        as soon as the URL is seen stops it (sent before, under ``SIG_IGN``, it was lost and
        the dashboard served on). Outside the main thread (no signal handlers there) it serves
        until ``close()``."""
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, _interrupt)
        try:
            if ready is not None:
                ready()
            self.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            for sig, handler in previous.items():
                if handler is not None:          # None: a handler not set from Python
                    signal.signal(sig, handler)
            self.close()

    def start(self) -> "Dashboard":
        self._thread = threading.Thread(target=self.serve_forever, name="hypersack-dashboard",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()

    # ---- the API (each call: open read-only, read, close) ----------------------------------

    def studies(self) -> list[dict[str, Any]]:
        """The studies it serves (``scope``) with their status and counts."""
        from hypersack.runtime.storage.sqlite import Storage
        if not self.storage.exists():
            return []
        try:
            store = Storage(self.storage, readonly=True)
        except StorageError as exc:
            if "no such table" in str(exc):      # a driver is creating the file right now
                return []
            raise
        with store:
            found = store.list_studies()
        return found if self.only is None else [s for s in found if s["name"] == self.only]

    def study(self, name: str) -> dict[str, Any]:
        """The report's payload of study ``name``: StudyNotFoundError for a study it does not
        serve (``scope``), as for one that is not stored."""
        from hypersack.report.data import from_storage, payload
        from hypersack.runtime.storage.sqlite import Storage
        if self.only is not None and name != self.only:
            raise StudyNotFoundError(name, f"{self.storage} (this dashboard serves study "
                                           f"{self.only!r} only)")
        try:
            store = Storage(self.storage, readonly=True)
        except StorageError as exc:
            if not self.storage.exists() or "no such table" in str(exc):   # being created
                raise StudyNotFoundError(name, str(self.storage)) from None
            raise
        with store:
            return payload(from_storage(store, name))


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (an address, or "localhost") is this machine's loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Handler(BaseHTTPRequestHandler):
    dashboard: Dashboard
    server_version = "hypersack-dashboard"

    def do_GET(self) -> None:      # noqa: N802 (the stdlib's name)
        url = urlparse(self.path)
        board = self.dashboard
        if not board.allows_host(self.headers.get("Host")):
            self._json(403, {"error": "this dashboard answers requests for this machine's "
                                      "loopback address only (Host header refused)"})
            return
        given = parse_qs(url.query).get("token", [None])[0]
        self._set_cookie = given is not None and board.token is not None \
            and board.accepts_token(given)
        if given is None:
            given = self._cookie(board.cookie)
        if not board.accepts_token(given):
            self._json(403, {"error": "this dashboard needs its token: open the URL it printed "
                                      "when it started (…/?token=…)"})
            return
        try:
            if url.path in ("/", "/index.html"):
                self._send(200, self.dashboard._page, "text/html; charset=utf-8")
            elif url.path == "/api/studies":
                self._json(200, self.dashboard.studies())
            elif url.path == "/api/study":
                name = parse_qs(url.query).get("name", [""])[0]
                self._json(200, self.dashboard.study(name))
            else:
                self._json(404, {"error": f"no such page: {url.path}"})
        except StudyNotFoundError as exc:
            self._json(404, {"error": str(exc)})
        except HyperSackError as exc:
            self._json(503, {"error": str(exc)})

    def _json(self, code: int, value: Any) -> None:
        self._send(code, json.dumps(value, separators=(",", ":")).encode("utf-8"),
                   "application/json")

    def _cookie(self, name: str) -> str | None:
        from http.cookies import CookieError, SimpleCookie
        try:
            jar = SimpleCookie(self.headers.get("Cookie", ""))
        except CookieError:
            return None
        return jar[name].value if name in jar else None

    def _send(self, code: int, body: bytes, kind: str) -> None:
        self.send_response(code)
        if getattr(self, "_set_cookie", False):
            self.send_header("Set-Cookie", f"{self.dashboard.cookie}={self.dashboard.token}; "
                                           "Path=/; HttpOnly; SameSite=Strict")
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a page polling every 2 s would fill the terminal."""
