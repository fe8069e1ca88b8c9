"""pklimit.lease, the concurrency limit on pklimit's leases: the bound under
threads, the context manager and the decorator, release on an exception,
refusal with retry_after, renewal, tenants and policies; and in a Flask
application served by werkzeug's threaded server: at most max handlers at
once, 429 with Retry-After, a handler that raises and a client that goes
away mid-request both leave the lease released."""

import concurrent.futures
import datetime
import socket
import threading
import time
import unittest
import urllib.error
import urllib.request

import flask
import psycopg
import psycopg_pool
from werkzeug.serving import make_server

import pklimit
from common import URI, libpq, sql, unique


def held(key, tenant=None):
    if tenant is None:
        return sql("SELECT count(*) FROM pklimit_leases(%s)", (key,))[0][0]
    with psycopg.connect(libpq(URI), autocommit=True) as conn:
        conn.execute("SELECT set_config('platformkit.tenant', %s, false)", (tenant,))
        return conn.execute("SELECT count(*) FROM pklimit_leases(%s)", (key,)).fetchone()[0]


def until(condition, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Leases(unittest.TestCase):
    def setUp(self):
        self.pool = psycopg_pool.ConnectionPool(libpq(URI), min_size=1, max_size=16,
                                                kwargs={"autocommit": True}, open=True)
        self.addCleanup(self.pool.close)

    def test_never_more_than_max_at_once_under_threads(self):
        key = unique("threads")
        lock = threading.Lock()
        state = {"now": 0, "most": 0, "granted": 0, "refused": 0}

        def one():
            try:
                with pklimit.lease(self.pool, key, 3, "1 minute"):
                    with lock:
                        state["now"] += 1
                        state["granted"] += 1
                        state["most"] = max(state["most"], state["now"])
                    time.sleep(0.01)
                    with lock:
                        state["now"] -= 1
            except pklimit.LeaseRefused:
                with lock:
                    state["refused"] += 1

        with concurrent.futures.ThreadPoolExecutor(16) as threads:
            for f in [threads.submit(one) for _ in range(200)]:
                f.result()
        self.assertLessEqual(state["most"], 3)
        self.assertEqual(state["most"], 3, "the bound was reached")
        self.assertEqual(state["granted"] + state["refused"], 200)
        self.assertEqual(held(key), 0, "every lease released")

    def test_refused_raises_with_retry_after_and_the_exception_releases(self):
        key = unique("refused")
        with pklimit.lease(self.pool, key, 1, datetime.timedelta(minutes=10)) as first:
            self.assertTrue(first.is_lease)
            self.assertEqual((first.held, first.max_concurrent, first.status), (1, 1, "ok"))
            with self.assertRaises(pklimit.LeaseRefused) as refused:
                with pklimit.lease(self.pool, key, 1, "10 minutes"):
                    self.fail("no second lease")
            self.assertEqual((refused.exception.held, refused.exception.max_concurrent), (1, 1))
            self.assertGreater(refused.exception.retry_after, 590)
            self.assertLessEqual(refused.exception.retry_after, 600)
        self.assertEqual(held(key), 0)
        with self.assertRaises(RuntimeError):
            with pklimit.lease(self.pool, key, 1, 600):
                self.assertEqual(held(key), 1)
                raise RuntimeError("the export failed")
        self.assertEqual(held(key), 0, "released on the way out of an exception")

    def test_decorator_takes_a_lease_per_call(self):
        key = unique("decorated")
        inside = []

        @pklimit.lease(self.pool, key, 1, "1 minute")
        def job(n):
            inside.append(held(key))
            return n * 2

        self.assertEqual([job(1), job(2)], [2, 4])
        self.assertEqual(inside, [1, 1], "each call held the lease, the one before it released")
        self.assertEqual(held(key), 0)

        @pklimit.lease(self.pool, key, 1, "1 minute")
        def nested():
            return job(3)

        with self.assertRaises(pklimit.LeaseRefused):
            nested()
        self.assertEqual(held(key), 0)

    def test_renew_and_a_connection_of_its_own(self):
        key = unique("renewed")
        with psycopg.connect(libpq(URI)) as conn:   # not autocommit: no transaction left open
            with pklimit.lease(conn, key, 1, "2 seconds") as lease:
                self.assertTrue(lease.renew("1 hour"))
                self.assertEqual(conn.info.transaction_status, psycopg.pq.TransactionStatus.IDLE)
                (length,), = sql("SELECT expires_at - acquired_at >= interval '1 hour' FROM pklimit_leases(%s)",
                                 (key,))
                self.assertTrue(length)
            self.assertFalse(lease.release(), "released once already")
        self.assertEqual(held(key), 0)

    def test_a_failed_transaction_leaves_the_connection_usable(self):
        key = unique("failed")
        with psycopg.connect(libpq(URI)) as conn:
            with self.assertLogs("pklimit.lease", "WARNING"):
                with self.assertRaises(psycopg.errors.DivisionByZero):
                    with pklimit.lease(conn, key, 1, "1 hour"):
                        conn.execute("SELECT 1/0")
            conn.rollback()
            self.assertEqual(conn.execute("SELECT 1").fetchone(), (1,), "the connection works again")
        self.assertEqual(held(key), 1, "the lease could not be released there: it ends by itself")
        (released,), = sql("SELECT bool_and(pklimit_release(%s, token)) FROM pklimit_leases(%s)", (key, key))
        self.assertTrue(released)

    def test_keys_stored_as_the_node_client_stores_them(self):
        tag = unique("off")    # unique() differs at each call: made once
        with pklimit.lease(self.pool, "50%\x00" + tag, 1, "1 minute"):
            (stored,), = sql("SELECT key FROM platformkit_leases WHERE strpos(key, %s) > 0", (tag,))
            self.assertEqual(stored, "g:50%25%00" + tag)

    def test_tenant_and_policy(self):
        key = unique("tenanted")
        policy = unique("exports")
        sql("SELECT pklimit_policy_set(%s, 1, '10 minutes')", (policy,))
        sql("SELECT pklimit_policy_set(%s, 2, '10 minutes', tenant => 'bigco')", (policy,))
        with pklimit.lease(self.pool, key, policy=policy, tenant="acme") as a:
            self.assertEqual(a.max_concurrent, 1)
            with self.assertRaises(pklimit.LeaseRefused):
                with pklimit.lease(self.pool, key, policy=policy, tenant="acme"):
                    pass
            with pklimit.lease(self.pool, key, policy=policy, tenant="bigco"), \
                    pklimit.lease(self.pool, key, policy=policy, tenant="bigco") as b:
                self.assertEqual((b.held, b.max_concurrent), (2, 2))
                self.assertEqual((held(key, "acme"), held(key, "bigco"), held(key)), (1, 2, 0))
        self.assertEqual((held(key, "acme"), held(key, "bigco")), (0, 0))

    def test_a_lease_is_held_once_at_a_time(self):
        key = unique("twice")
        shared = pklimit.lease(self.pool, key, 2, "1 minute")
        with shared:
            with self.assertRaises(RuntimeError):
                with shared:
                    self.fail("not entered twice")
            self.assertEqual(held(key), 1, "the first lease kept, and no second one")
        self.assertEqual(held(key), 0, "released on leaving")
        with shared:
            self.assertEqual(held(key), 1, "entered again once released")

    def test_the_tenant_using_tenant_set(self):
        from pklimit.limits import using_tenant

        key = unique("context-tenant")
        with using_tenant("acme"):
            with pklimit.lease(self.pool, key, 1, "1 minute") as a:
                self.assertEqual((held(key, "acme"), held(key)), (1, 0))
                with pklimit.lease(self.pool, key, 1, "1 minute", tenant="") as untenanted:
                    self.assertEqual(untenanted.held, 1, "tenant='' is no tenant")
                    self.assertEqual(held(key), 1)
            self.assertIsNone(a.token)
        self.assertEqual((held(key, "acme"), held(key)), (0, 0), "each released in its own tenant")

    def test_arguments_are_checked(self):
        with self.assertRaises(ValueError):
            pklimit.lease(self.pool, "k", 1001, "1 minute")
        with self.assertRaises(TypeError):
            pklimit.lease(self.pool, "k", 2)
        with self.assertRaises(TypeError):
            pklimit.lease(self.pool, "k", 2, "1 minute", policy="p")
        with self.assertRaises(ValueError):
            pklimit.lease(self.pool, "", 2, "1 minute")


def create_export_app(pool, key, gate):
    """A Flask app whose /export runs under a lease of at most 2 at once:
    LeaseRefused becomes 429 with Retry-After; ?fail=1 raises; each export
    waits for gate."""
    app = flask.Flask("exports")
    app.running = 0
    app.most = 0
    lock = threading.Lock()

    @app.errorhandler(pklimit.LeaseRefused)
    def refused(error):
        retry = 1 if error.retry_after is None else max(1, int(error.retry_after + 0.999))
        return "too many exports at once", 429, {"Retry-After": str(retry)}

    @app.route("/export")
    def export():
        with pklimit.lease(pool, key, 2, "1 minute"):
            with lock:
                app.running += 1
                app.most = max(app.most, app.running)
            try:
                gate.wait(30)
                if flask.request.args.get("fail"):
                    raise RuntimeError("export failed")
                return "exported"
            finally:
                with lock:
                    app.running -= 1

    return app


class FlaskExports(unittest.TestCase):
    def setUp(self):
        self.pool = psycopg_pool.ConnectionPool(libpq(URI), min_size=1, max_size=8,
                                                kwargs={"autocommit": True}, open=True)
        self.addCleanup(self.pool.close)
        self.key = unique("flask-export")
        self.gate = threading.Event()
        self.app = create_export_app(self.pool, self.key, self.gate)
        self.server = make_server("127.0.0.1", 0, self.app, threaded=True)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        self.addCleanup(self.gate.set)

    def get(self, path="/export"):
        try:
            with urllib.request.urlopen(self.base + path, timeout=60) as response:
                return response.status, response.headers.get("Retry-After")
        except urllib.error.HTTPError as error:
            return error.code, error.headers.get("Retry-After")

    def test_at_most_two_exports_then_429_with_retry_after(self):
        with concurrent.futures.ThreadPoolExecutor(6) as threads:
            futures = [threads.submit(self.get) for _ in range(6)]
            until(lambda: sum(f.done() for f in futures) == 4, "four refused")
            self.assertEqual(held(self.key), 2)
            self.gate.set()
            answers = sorted(f.result() for f in futures)
        self.assertEqual([status for status, _ in answers], [200, 200, 429, 429, 429, 429])
        for status, retry in answers:
            if status == 429:
                self.assertGreaterEqual(int(retry), 1)
        self.assertEqual(self.app.most, 2)
        until(lambda: held(self.key) == 0, "the leases released")

    def test_a_handler_that_raises_releases(self):
        self.gate.set()
        status, _ = self.get("/export?fail=1")
        self.assertEqual(status, 500)
        self.assertEqual(held(self.key), 0)

    def test_a_client_that_goes_away_mid_request_leaves_no_lease(self):
        client = socket.create_connection(("127.0.0.1", self.server.server_port))
        client.sendall(b"GET /export HTTP/1.1\r\nHost: x\r\n\r\n")
        until(lambda: held(self.key) == 1, "the export running")
        client.close()                       # gone before the answer
        self.gate.set()
        until(lambda: self.app.running == 0, "the export finished")
        until(lambda: held(self.key) == 0, "its lease released")


if __name__ == "__main__":
    unittest.main()
