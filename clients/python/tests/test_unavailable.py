"""pklimit.on_unavailable seen through the storage and flask-limiter, on a
node where no worker can start (every call answers no_worker at once)."""

import logging
import sys
import time
import unittest
import urllib.parse

import psycopg

from app import create_app
from common import UNAVAILABLE_URI, sql, unique, with_query
from limits.storage import storage_from_string

DAY = 86400


def uri_with(on_unavailable):
    """The unavailable node, this session's pklimit.on_unavailable set
    through libpq's options parameter (the URI's query goes to libpq)."""
    return with_query(UNAVAILABLE_URI,
                      options=urllib.parse.quote(f"-c pklimit.on_unavailable={on_unavailable}"))


class Unavailable(unittest.TestCase):
    def storage(self, on_unavailable):
        storage = storage_from_string(uri_with(on_unavailable))
        self.addCleanup(storage.close)
        return storage

    def test_the_node_has_no_worker(self):
        self.assertEqual(sql("SELECT status FROM pklimit_check('probe', 1, '1 day')",
                             uri=UNAVAILABLE_URI), [("no_worker",)])

    def test_allow(self):
        storage = self.storage("allow")
        with self.assertLogs("pklimit", logging.WARNING) as logs:
            self.assertEqual(storage.incr(unique("allow"), DAY, amount=3), 0)
        self.assertIn("no_worker", "\n".join(logs.output))
        with self.assertLogs("pklimit", logging.WARNING):
            self.assertEqual(storage.get(unique("allow")), 0)
        with self.assertLogs("pklimit", logging.WARNING):
            storage.clear(unique("allow"))
        before = int(time.time())
        with self.assertLogs("pklimit", logging.WARNING):
            self.assertGreaterEqual(storage.get_expiry(unique("allow")), before, "now")
        with self.assertLogs("pklimit", logging.WARNING):
            self.assertIs(storage.acquire_sliding_window_entry(unique("allow"), 1, DAY, amount=5), True)
        with self.assertLogs("pklimit", logging.WARNING):
            self.assertEqual(storage.get_sliding_window(unique("allow"), DAY), (0, 0.0, 0, 0.0))
        self.assertFalse(storage.check())

    def test_deny(self):
        storage = self.storage("deny")
        with self.assertLogs("pklimit", logging.WARNING):
            self.assertEqual(storage.incr(unique("deny"), DAY), sys.maxsize)
        with self.assertLogs("pklimit", logging.WARNING):
            self.assertEqual(storage.get(unique("deny")), sys.maxsize)
        with self.assertLogs("pklimit", logging.WARNING):
            self.assertIs(storage.acquire_sliding_window_entry(unique("deny"), 10, DAY), False)
        with self.assertLogs("pklimit", logging.WARNING):
            self.assertEqual(storage.get_sliding_window(unique("deny"), DAY), (0, 0.0, sys.maxsize, 0.0))

    def test_error(self):
        storage = self.storage("error")
        with self.assertRaises(psycopg.Error) as raised:
            storage.incr(unique("error"), DAY)
        self.assertEqual(raised.exception.sqlstate, "53000")
        with self.assertRaises(psycopg.Error):
            storage.get(unique("error"))
        for call in (lambda: storage.clear(unique("error")), lambda: storage.get_expiry(unique("error")),
                     lambda: storage.acquire_sliding_window_entry(unique("error"), 1, DAY),
                     lambda: storage.get_sliding_window(unique("error"), DAY)):
            with self.assertRaises(psycopg.Error) as raised:
                call()
            self.assertEqual(raised.exception.sqlstate, "53000")
        self.assertFalse(storage.check())

    def flask(self, on_unavailable, swallow_errors):
        app = create_app(uri_with(on_unavailable), "1 per day", swallow_errors=swallow_errors,
                         name=f"{on_unavailable}-{swallow_errors}")
        self.addCleanup(app.limiter._storage.close)
        client = app.test_client()
        who = unique("client")
        return [client.get("/limited", headers={"X-Client": who}) for _ in range(3)]

    def test_flask_allow(self):
        for swallow in (False, True):
            with self.subTest(swallow_errors=swallow), self.assertLogs("pklimit", logging.WARNING):
                answers = self.flask("allow", swallow)
                self.assertEqual([r.status_code for r in answers], [200, 200, 200])
                # get answers 0: the whole limit is shown remaining
                self.assertEqual(answers[-1].headers["X-RateLimit-Remaining"], "1")

    def test_flask_deny(self):
        for swallow in (False, True):
            with self.subTest(swallow_errors=swallow), self.assertLogs("pklimit", logging.WARNING):
                answers = self.flask("deny", swallow)
                self.assertEqual([r.status_code for r in answers], [429, 429, 429])
                self.assertEqual(answers[0].headers["X-RateLimit-Remaining"], "0")

    def test_flask_error_raised(self):
        # Flask logs the unhandled exception on the application's logger
        with self.assertLogs("error-False", logging.ERROR) as logs:
            answers = self.flask("error", False)
        self.assertIn("no_worker", "\n".join(logs.output))
        self.assertEqual([r.status_code for r in answers], [500, 500, 500])

    def test_flask_error_swallowed(self):
        with self.assertLogs("flask-limiter", logging.ERROR) as logs:
            answers = self.flask("error", True)
        self.assertEqual([r.status_code for r in answers], [200, 200, 200])
        self.assertIn("Swallowing error", "\n".join(logs.output))


if __name__ == "__main__":
    unittest.main()
