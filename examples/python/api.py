#!/usr/bin/python3
"""An HTTP API rate limited per API key with pklimit's GCRA (psycopg 3,
Debian's python3-psycopg, and the standard library's wsgiref).

One route, GET /v1/quote, on 127.0.0.1. A request names its API key as
"Authorization: Bearer <key>" or "X-Api-Key: <key>"; a missing or unknown key
is answered 401. Each key may make 10 requests per second, counted with
algorithm => 'gcra': a quiet key may burst 10 at once, then one every 100 ms.
The route does no other work, so the limit takes pklimit's memory path
(durable => false): decided in shared memory at about the cost of a
SELECT 1, written to the table within pklimit.flush_interval.

    /usr/bin/python3 api.py [port]        (or PORT=...; 0 picks a free port)
    curl -i -H 'Authorization: Bearer key-acme-1' http://127.0.0.1:8000/v1/quote

    200 {"quote": ...}     RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset
    429 {"error": ...}     the same, RateLimit-Remaining: 0, and Retry-After

API_LIMIT and API_WINDOW change the limit (10 per "1 second" by default).
The connection comes from the usual libpq environment (PGHOST, PGPORT,
PGDATABASE, PGUSER, ...) or from the DATABASE_URL environment variable.
"""
import json
import os
import sys
from wsgiref.simple_server import make_server

import psycopg

LIMIT = int(os.environ.get("API_LIMIT", "10"))
WINDOW = os.environ.get("API_WINDOW", "1 second")

# A fake key table: API key -> tenant, so the example needs no real one.
API_KEYS = {"key-acme-1": "acme", "key-acme-2": "acme", "key-globex-1": "globex"}


def api_key(environ):
    """The key of "Authorization: Bearer <key>", else of "X-Api-Key"."""
    scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return environ.get("HTTP_X_API_KEY", "").strip()


def check(conn, tenant: str, key: str):
    """Records one request of the key: returns (allowed, headers)."""
    with conn.transaction():
        # The tenant for this transaction only (SET LOCAL, as a bind
        # parameter), so a pooled server connection never carries it over.
        conn.execute("SELECT set_config('platformkit.tenant', %s, true)", (tenant,))
        # Seconds are rounded up on the database's clock, the one reset_at is
        # on; clock_timestamp() is read after the call. A refused request is
        # recorded too (record_refused's default): a client that ignores
        # Retry-After stays refused, one that waits gets through. durable =>
        # false: a crash of the server may lose the last second of requests,
        # which a per-request limit can afford (a login lockout could not).
        allowed, remaining, reset, retry_after, status = conn.execute(
            "SELECT allowed, remaining,"
            " ceil(extract(epoch FROM reset_at - clock_timestamp()))::bigint,"
            " ceil(extract(epoch FROM retry_after))::bigint, status"
            " FROM pklimit_check('api:' || %s, %s::bigint, %s::interval,"
            " algorithm => 'gcra', durable => false)",
            (key, LIMIT, WINDOW),
        ).fetchone()
    headers = [("RateLimit-Limit", str(LIMIT))]
    # NULL when the store was not reached (allowed is then what
    # pklimit.on_unavailable says): no figures to send.
    if remaining is not None:
        headers += [("RateLimit-Remaining", str(remaining)), ("RateLimit-Reset", str(reset))]
    if status != "ok":
        headers.append(("X-RateLimit-Status", status))
    if not allowed and retry_after is not None:
        # Whole seconds, rounded up: a wait of 100 ms is sent as 1.
        headers.append(("Retry-After", str(retry_after)))
    return allowed, headers


def app(conn):
    """The WSGI application, on one connection."""

    def handle(environ, start_response):
        def reply(status, body, headers=()):
            data = json.dumps(body).encode()
            start_response(status, [("Content-Type", "application/json"),
                                    ("Content-Length", str(len(data))), *headers])
            return [data]

        if environ["PATH_INFO"] != "/v1/quote":
            return reply("404 Not Found", {"error": "not found"})
        if environ["REQUEST_METHOD"] != "GET":
            return reply("405 Method Not Allowed", {"error": "method not allowed"}, [("Allow", "GET")])
        # Authenticate first: an unknown key has no limit of its own to count in.
        key = api_key(environ)
        tenant = API_KEYS.get(key)
        if tenant is None:
            return reply("401 Unauthorized", {"error": "missing or unknown API key"},
                         [("WWW-Authenticate", "Bearer")])
        allowed, headers = check(conn, tenant, key)
        if not allowed:
            return reply("429 Too Many Requests", {"error": "rate limited"}, headers)
        return reply("200 OK", {"quote": "Simple is better than complex."}, headers)

    return handle


def main():
    port = int(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PORT", "8000"))
    # prepare_threshold=None: no server-side prepared statements, so the
    # handler also works behind pgbouncer in transaction pooling mode.
    with psycopg.connect(os.environ.get("DATABASE_URL", ""), autocommit=True,
                         prepare_threshold=None) as conn:
        # wsgiref serves one request at a time, so one connection is enough;
        # a threaded server would take one per request from a pool.
        with make_server("127.0.0.1", port, app(conn)) as server:
            print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
            server.serve_forever()


if __name__ == "__main__":
    main()
