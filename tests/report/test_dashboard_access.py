"""Who may read the dashboard, and what it serves (issue 37): a Host header that is not this
machine's loopback is refused while it listens there (DNS rebinding); started for a study it
serves that study only; on any other address a token, printed once in its URL, is required."""
from __future__ import annotations

import http.client
import json

import pytest
from report_store import fill_store

from hypersack.report.dashboard import Dashboard


@pytest.fixture
def two_studies(tmp_path):
    path = tmp_path / "two.db"
    fill_store(path, name="small")
    fill_store(path, name="other", n=3)
    return path


def _get(board: Dashboard, path: str, host: str | None = None,
         cookie: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET ``path`` from the dashboard at 127.0.0.1 with this Host header (default: the
    address's own) and Cookie header."""
    conn = http.client.HTTPConnection("127.0.0.1", board.port, timeout=30)
    try:
        headers = {"Cookie": cookie} if cookie else {}
        if host is not None:
            conn.putrequest("GET", path, skip_host=True)
            conn.putheader("Host", host)
            for key, value in headers.items():
                conn.putheader(key, value)
            conn.endheaders()
        else:
            conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def test_on_loopback_a_foreign_host_header_is_refused(two_studies):
    board = Dashboard(two_studies, port=0).start()
    try:
        assert board.token is None                     # loopback: no token, the Host check
        for host in ("attacker.example", f"attacker.example:{board.port}", "127.0.0.1.nip.io",
                     "10.0.0.5"):
            assert _get(board, "/api/studies", host=host)[0] == 403, host   # was 200
        assert _get(board, "/", host="rebind.attacker.example")[0] == 403
        for host in (f"127.0.0.1:{board.port}", f"localhost:{board.port}", "localhost",
                     f"[::1]:{board.port}"):
            assert _get(board, "/api/studies", host=host)[0] == 200, host
        assert _get(board, "/api/studies")[0] == 200
    finally:
        board.close()


def test_started_for_a_study_it_serves_that_study_only(two_studies):
    board = Dashboard(two_studies, study="small", port=0).start()
    try:
        status, _, body = _get(board, "/api/studies")
        assert status == 200 and [s["name"] for s in json.loads(body)] == ["small"]   # was both
        assert _get(board, "/api/study?name=small")[0] == 200
        status, _, body = _get(board, "/api/study?name=other")
        assert status == 404 and b"serves study 'small' only" in body
        assert "only" in board.scope()
    finally:
        board.close()


def test_started_without_a_study_it_serves_the_whole_store_and_says_so(two_studies):
    board = Dashboard(two_studies, port=0).start()
    try:
        status, _, body = _get(board, "/api/studies")
        assert sorted(s["name"] for s in json.loads(body)) == ["other", "small"]
        assert _get(board, "/api/study?name=other")[0] == 200
        assert "every study" in board.scope()
    finally:
        board.close()


def test_on_any_other_address_every_request_needs_the_printed_token(two_studies):
    board = Dashboard(two_studies, host="0.0.0.0", port=0).start()
    try:
        assert not board.loopback and board.token and len(board.token) >= 24
        assert board.url.endswith(f"/?token={board.token}")
        for path in ("/", "/api/studies", "/api/study?name=small"):
            assert _get(board, path)[0] == 403, path                   # was 200
        assert _get(board, "/api/studies?token=wrong")[0] == 403
        assert _get(board, "/api/studies", cookie=f"{board.cookie}=wrong")[0] == 403
        status, headers, body = _get(board, f"/?token={board.token}")
        assert status == 200 and b"HyperSack.live" in body
        cookie = headers["Set-Cookie"]
        assert cookie.startswith(f"{board.cookie}={board.token};") and "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        status, headers, _ = _get(board, "/api/studies", cookie=cookie.split(";")[0])
        assert status == 200 and "Set-Cookie" not in headers         # the page's own requests
    finally:
        board.close()


def test_two_dashboards_get_different_tokens(two_studies):
    boards = [Dashboard(two_studies, host="0.0.0.0", port=0) for _ in range(2)]
    try:
        assert boards[0].token != boards[1].token and boards[0].cookie != boards[1].cookie
    finally:
        for b in boards:
            b.close()


def test_the_command_says_what_it_serves_and_warns_off_loopback(two_studies, subprocess_env):
    import signal
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "hypersack", "dashboard", "small", "--storage",
                             str(two_studies), "--host", "0.0.0.0", "--port", "0"],
                            env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert "?token=" in line and "study 'small' only" in line, line
    assert "warning: listening on 0.0.0.0" in err                  # was silent


def test_the_url_is_announced_only_once_ctrl_c_stops_the_dashboard(two_studies):
    """``ready`` (the command's URL line) runs once SIGINT is taken: a Ctrl-C sent as soon as
    the URL is seen stops it, even in a process started with SIGINT ignored (before, the URL
    came first, and a signal in between was lost: the dashboard served on)."""
    import signal
    from hypersack.report import dashboard
    board = Dashboard(two_studies, port=0)
    seen = []

    def ready():
        seen.append(signal.getsignal(signal.SIGINT))
        raise KeyboardInterrupt                    # the Ctrl-C right after the URL

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        board.serve_until_interrupted(ready=ready)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN      # given back
    finally:
        signal.signal(signal.SIGINT, before)
    assert seen == [dashboard._interrupt]
