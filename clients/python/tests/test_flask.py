"""flask-limiter with the pklimit storage, served by werkzeug's threaded
server as two replicas of one application on one database."""

import concurrent.futures
import logging
import math
import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

import psycopg_pool

from app import create_app, serve
from common import POOLER_URI, URI, clock, libpq, rows, sql, unique

HOUR = 3600
HERE = os.path.dirname(os.path.abspath(__file__))


def get(base, client, tenant=None):
    """GET base/limited as client: (status, headers)."""
    headers = {"X-Client": client}
    if tenant is not None:
        headers["X-Tenant"] = tenant
    request = urllib.request.Request(base + "/limited", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.headers


def exact_429_and_headers(case, a, b, client):
    """Seven requests of client, by turns on replicas a and b under "5 per
    hour": five pass and two get 429, each with the X-RateLimit-* headers and
    a Retry-After of the one window they share, which the first request
    opened (the storage's default anchor, 'first')."""
    started = time.time()
    opened = clock()
    answers = [get(a, client)]
    opened = (opened, clock())
    answers += [get(base, client) for base in (b, a, b, a, b, a)]
    case.assertEqual([status for status, _ in answers], [200] * 5 + [429] * 2)
    # flask-limiter renders the storage's expiry as int(expiry) + 1
    resets = {headers["X-RateLimit-Reset"] for _, headers in answers}
    case.assertEqual(len(resets), 1, f"one window: {resets}")
    reset = int(resets.pop()) - 1
    case.assertGreaterEqual(reset, int(opened[0] + HOUR), "the window ends an hour after the first request")
    case.assertLessEqual(reset, opened[1] + HOUR)
    for i, (status, headers) in enumerate(answers):
        case.assertEqual(headers["X-RateLimit-Limit"], "5")
        case.assertEqual(headers["X-RateLimit-Remaining"], str(max(0, 4 - i)))
        retry_after = int(headers["Retry-After"])
        case.assertLessEqual(retry_after, reset + 1 - math.floor(started) + 1)
        case.assertGreaterEqual(retry_after, reset - math.ceil(time.time()) - 1)


class Served:
    """An application served on a free port in a thread of this process."""

    def __init__(self, app):
        self.app = app
        self.server = serve(app)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.app.limiter._storage.close()


class Replicas(unittest.TestCase):
    uri = URI

    def replicas(self, limit, uri=None, **options):
        served = [Served(create_app(uri or self.uri, limit, name=f"replica-{i}", **options))
                  for i in "ab"]
        for s in served:
            self.addCleanup(s.stop)
        return [s.base for s in served]

    def test_exact_429_and_headers_across_replicas(self):
        client = unique("headers")
        exact_429_and_headers(self, *self.replicas("5 per hour"), client)
        (key, count), = rows(client)
        self.assertEqual(count, 7, "every request counts, refused ones too")
        self.assertTrue(key.startswith("g:LIMITER/" + client), key)

    def test_concurrent_requests_exact(self):
        client = unique("burst")
        bases = self.replicas("10 per day")
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda i: get(bases[i % 2], client)[0], range(30)))
        self.assertEqual(statuses.count(200), 10)
        self.assertEqual(statuses.count(429), 20)
        self.assertEqual(rows(client)[0][1], 30)

    def test_tenants(self):
        client = unique("tenants")
        a, b = self.replicas("2 per day")
        self.assertEqual([get(a, client, "acme")[0], get(b, client, "acme")[0],
                          get(a, client, "acme")[0]], [200, 200, 429])
        self.assertEqual(get(b, client, "globex")[0], 200, "another tenant, its own count")
        self.assertEqual(get(a, client)[0], 200, "no tenant, its own count")
        self.assertEqual(get(b, client, "globex")[1]["X-RateLimit-Remaining"], "0")
        self.assertEqual([c for _, c in rows(client)], [1, 3, 2])
        self.assertEqual([k.split("LIMITER")[0] for k, _ in rows(client)],
                         ["g:", "t4:acme:", "t6:globex:"])


class ThroughPgbouncer(Replicas):
    """The same, through pgbouncer in transaction pooling mode with one
    server connection: no prepared statement breaks, no tenant leaks."""

    uri = POOLER_URI

    def test_no_tenant_left_on_the_server_connection(self):
        client = unique("pooled")
        a, b = self.replicas("5 per day")
        self.assertEqual(get(a, client, "acme")[0], 200)
        self.assertEqual(get(b, client)[0], 200)
        self.assertEqual(sql("SELECT coalesce(current_setting('platformkit.tenant', true), '')",
                             uri=POOLER_URI), [("",)])
        self.assertEqual([k.split("LIMITER")[0] for k, _ in rows(client)], ["g:", "t4:acme:"])


class Durability(unittest.TestCase):
    def test_count_survives_a_restart(self):
        client = unique("restart")

        def run_once():
            process = subprocess.Popen([sys.executable, os.path.join(HERE, "app.py"), URI, "3 per day"],
                                       stdout=subprocess.PIPE, text=True, cwd=HERE)
            try:
                line = process.stdout.readline()
                self.assertTrue(line.startswith("listening on "), line)
                base = line.split()[-1]
                return [get(base, client) for _ in range(2)]
            finally:
                process.terminate()
                process.wait(timeout=60)

        first = run_once()
        second = run_once()
        self.assertEqual([s for s, _ in first + second], [200, 200, 200, 429])
        self.assertEqual([h["X-RateLimit-Remaining"] for _, h in first + second], ["2", "1", "0", "0"])
        self.assertEqual(rows(client)[0][1], 4)

    def test_hit_survives_the_applications_rollback(self):
        client = unique("rollback")
        sql("CREATE TABLE IF NOT EXISTS app_log (client text)")
        pool = psycopg_pool.ConnectionPool(libpq(URI), min_size=1, max_size=4,
                                           kwargs={"prepare_threshold": None})
        self.addCleanup(pool.close)
        served = Served(create_app(URI, "2 per day", app_transaction_pool=pool))
        self.addCleanup(served.stop)
        statuses = [get(served.base, client)[0] for _ in range(3)]
        self.assertEqual(statuses, [200, 200, 429])
        self.assertEqual(sql("SELECT count(*) FROM app_log WHERE client = %s", (client,)), [(0,)],
                         "the application's transactions rolled back")
        self.assertEqual(rows(client)[0][1], 3, "the hits stayed counted")


if __name__ == "__main__":
    logging.basicConfig()
    unittest.main()
