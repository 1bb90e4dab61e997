"""A tiny HTTP server limited per client: `python3 app.py --redis-port 6379 --port 8000`.

Each client (the `X-User` header, else its address) gets bursts of 5, then
1 request per second; `?cost=n` makes a request cost n tokens.
"""

import argparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import redis

from ratelimit_middleware import RateLimiter


def make_server(redis_port, port, fail_open=True, host="127.0.0.1"):
    client = redis.Redis(host="127.0.0.1", port=redis_port, socket_timeout=1,
                         socket_connect_timeout=1)
    limiter = RateLimiter(client, "api", max_burst=4, per_period=1, period=1,
                          fail_open=fail_open)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            user = self.headers.get("X-User") or self.client_address[0]
            query = parse_qs(urlparse(self.path).query)
            cost = int(query.get("cost", ["1"])[0])
            result = limiter.check(f"rl:api:{user}", cost)
            body = b"hello\n" if result.allowed else b"too many requests\n"
            self.send_response(result.status)
            for name, value in result.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((host, port), Handler)
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
