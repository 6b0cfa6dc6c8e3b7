"""A real S3 API on 127.0.0.1 for the bucket tests and benchmark: moto in server mode, and a small
fault-injecting HTTP proxy in front of it (throttling, server errors, latency: what moto cannot do)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
INTERNAL = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message></Error>"
)
ACCESS_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
)
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[object, str]:
    """A moto S3 server on a free port: (server, endpoint URL). Stop it with ``server.stop()``."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, f"http://127.0.0.1:{port}"


class FaultProxy:
    """Forwards every request to ``upstream``; object GETs (``GET /bucket/key``, not listings) whose key
    contains ``match`` fail with ``status`` (503 SlowDown, 500 InternalError) for their first
    ``failures`` attempts; every request waits ``latency`` seconds first. Counts what it injected."""

    def __init__(self, upstream: str, *, failures: int = 0, status: int = 503, match: str = "", latency: float = 0.0):
        self.upstream = upstream.removeprefix("http://")
        self.failures, self.status, self.match, self.latency = failures, status, match, latency
        self.injected = 0
        self.requests = 0
        self.attempts: dict[str, int] = {}
        self.gets: dict[str, int] = {}  # object GETs by path (every one, injected or not)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if proxy.latency:
                    time.sleep(proxy.latency)
                path = self.path.split("?", 1)[0]
                is_object = self.command == "GET" and path.count("/") >= 2 and "?" not in self.path
                with proxy._lock:
                    proxy.requests += 1
                    if is_object:
                        proxy.gets[path] = proxy.gets.get(path, 0) + 1
                    inject = False
                    if is_object and proxy.failures and proxy.match in path:
                        n = proxy.attempts.get(path, 0)
                        proxy.attempts[path] = n + 1
                        inject = n < proxy.failures
                        proxy.injected += inject
                if inject:
                    payload = {503: SLOW_DOWN, 403: ACCESS_DENIED}.get(proxy.status, INTERNAL)
                    self.send_response(proxy.status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                # a HEAD's answer has no body but the object's length (what a reader sizes its reads by)
                length = resp.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
