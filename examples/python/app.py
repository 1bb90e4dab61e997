"""A tiny HTTP server limited per client: `python3 app.py --redis-port 6379 --port 8000`.

Each client (the `X-User` header, else its address) gets bursts of 5, then 1 request per
second; `?cost=n` makes a request cost n tokens. The limiting is the `redis_ratelimit` package
(clients/python): its WSGI middleware answers 429 with the IETF `RateLimit` / `RateLimit-Policy`
headers, the legacy `X-RateLimit-*` trio and `Retry-After`, fails open or closed (503) when
Redis is unreachable, and answers known-limited keys from a local cache until `retry_after`.
"""

import argparse
import sys
from pathlib import Path
from socketserver import ThreadingMixIn
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server as wsgi_server

try:
    import redis_ratelimit
except ImportError:  # not installed: use the package from this repository
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))
    import redis_ratelimit

from redis_ratelimit.middleware import Rule, WSGIRateLimitMiddleware, header_key


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "6")])
    return [b"hello\n"]


def cost(request):
    return int(parse_qs(request.query_string).get("cost", ["1"])[0])


class ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def make_server(redis_port, port, fail_open=True, host="127.0.0.1"):
    limiter = redis_ratelimit.RateLimiter.from_url(f"redis://127.0.0.1:{redis_port}", timeout_s=1)
    rules = [Rule(redis_ratelimit.GCRA(max_burst=4, tokens_per_period=1, period=1), path="/",
                  key=header_key("x-user"), cost=cost, name="api")]
    # legacy_headers: the X-RateLimit-* trio too (off by default; the IETF fields are always sent).
    app = WSGIRateLimitMiddleware(hello, limiter, rules, fail_open=fail_open, legacy_headers=True)
    server = wsgi_server(host, port, app, server_class=ThreadingServer, handler_class=QuietHandler)
    server.limiter = limiter
    return server


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-port", type=int, default=6379)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--fail-closed", action="store_true")
    args = parser.parse_args()
    server = make_server(args.redis_port, args.port, fail_open=not args.fail_closed)
    print(f"listening on http://127.0.0.1:{args.port}/")
    server.serve_forever()


if __name__ == "__main__":
    main()
