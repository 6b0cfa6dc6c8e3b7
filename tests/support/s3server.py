"""A real S3 API on 127.0.0.1 for the bucket tests and benchmark: moto in server mode, and a small
fault-injecting HTTP proxy in front of it (throttling, server errors, latency: what moto cannot do)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable
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
    """Forwards every request to ``upstream``; object GETs (``GET /bucket/key``, not listings; HEADs too with
    ``heads=True``) whose key
    contains ``match`` fail with ``status`` (503 SlowDown, 500 InternalError) for their first
    ``failures`` attempts; every request waits ``latency`` seconds first. Counts what it injected.

    ``lose_deletes``: the first that many object DELETEs whose key contains ``match`` are forwarded (the
    server deletes the object) and their answer is replaced by a 500 InternalError (a reply lost on the way
    back, as a dropped connection or a failing load balancer does); ``fail_deletes``: the next that many are
    not forwarded and answered 500 (the retry that fails). ``deletes`` lists what happened to each.
    ``rewrite_listing``: a listing request (``GET /bucket?list-type=2&...``) is forwarded as this function
    makes it (a hostile or broken server: another prefix, a continuation token dropped).
    ``listings``: bucket listings fail as object GETs do; ``puts``: object PUTs (uploads) too.
    ``rewrite_headers``: every forwarded answer's headers pass through ``rewrite_headers(method, path, headers)``
    (a list of ``(name, value)``; e.g. an Azure copy left ``x-ms-copy-status: pending``)."""

    def __init__(
        self,
        upstream: str,
        *,
        failures: int = 0,
        status: int = 503,
        match: str = "",
        latency: float = 0.0,
        listings: bool = False,
        lose_deletes: int = 0,
        fail_deletes: int = 0,
        rewrite_listing: Callable[[str], str] | None = None,
        heads: bool = False,
        puts: bool = False,
        rewrite_headers: Callable[[str, str, list[tuple[str, str]]], list[tuple[str, str]]] | None = None,
    ):
        self.upstream = upstream.removeprefix("http://")
        self.listings = listings
        self.failures, self.status, self.match, self.latency = failures, status, match, latency
        self.lose_deletes, self.fail_deletes = lose_deletes, fail_deletes
        self.heads = heads  # inject into object HEADs too (a HEAD's error has no body: the status says it)
        self.puts = puts  # inject into object PUTs (uploads) too: a prefix the credentials cannot write
        self.rewrite_listing = rewrite_listing  # request path+query of a ListObjectsV2 -> what is forwarded
        self.rewrite_headers = rewrite_headers
        self.deletes: list[tuple[str, str]] = []  # (path, "forwarded, answer lost" | "failed" | "forwarded")
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
                methods = ("GET", "HEAD") if proxy.heads else ("GET",)
                is_object = self.command in methods and path.count("/") >= 2 and "?" not in self.path
                is_object = is_object or (proxy.puts and self.command == "PUT" and path.count("/") >= 2)
                with proxy._lock:
                    proxy.requests += 1
                    if is_object:
                        proxy.gets[path] = proxy.gets.get(path, 0) + 1
                    inject = False
                    targeted = is_object or (proxy.listings and self.command == "GET")
                    if targeted and proxy.failures and proxy.match in path:
                        n = proxy.attempts.get(path, 0)
                        proxy.attempts[path] = n + 1
                        inject = n < proxy.failures
                        proxy.injected += inject
                    delete = ""
                    if self.command == "DELETE" and path.count("/") >= 2 and proxy.match in path:
                        done = len(proxy.deletes)
                        delete = (
                            "forwarded, answer lost"
                            if done < proxy.lose_deletes
                            else "failed"
                            if done < proxy.lose_deletes + proxy.fail_deletes
                            else "forwarded"
                        )
                        proxy.deletes.append((path, delete))
                        proxy.injected += delete != "forwarded"
                if delete == "failed":
                    self._answer(500, INTERNAL)
                    return
                if inject:
                    payload = {503: SLOW_DOWN, 403: ACCESS_DENIED}.get(proxy.status, INTERNAL)
                    self.send_response(proxy.status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                target = self.path
                if proxy.rewrite_listing and self.command == "GET" and "list-type=2" in target:
                    target = proxy.rewrite_listing(target)  # moto does not check the request's signature
                conn.request(self.command, target, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if delete == "forwarded, answer lost":  # the server did it; the client hears a failure
                    conn.close()
                    self._answer(500, INTERNAL)
                    return
                self.send_response(resp.status, resp.reason)
                answer_headers = resp.getheaders()
                if proxy.rewrite_headers is not None:
                    with proxy._lock:
                        answer_headers = proxy.rewrite_headers(self.command, path, answer_headers)
                for k, v in answer_headers:
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                # a HEAD's answer has no body: its Content-Length is the object's, passed on as it came
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            def _answer(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

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
