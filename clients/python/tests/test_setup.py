"""A database where pklimit's functions cannot be called as the storage
calls them: every call raises PklimitSetupError, whose message says what
to run, in place of "function pklimit_check(...) does not exist"."""

import logging
import unittest

import flask
from flask_limiter import Limiter
from limits.errors import ConfigurationError
from limits.storage import storage_from_string

from pklimit.limits import PklimitSetupError

from common import database, unique, with_query

DAY = 86400

# pklimit's databases of this suite beside postgres: none, in a schema off
# the search path, and a version older than the storage's default needs.
MISSING = "pklimit_missing"
ELSEWHERE = "pklimit_elsewhere"
OLD = "pklimit_old"


class Setup(unittest.TestCase):
    def storage(self, uri, **options):
        storage = storage_from_string(uri, **options)
        self.addCleanup(storage.close)
        return storage

    def every_call_says(self, storage, pattern):
        key = unique("setup")
        calls = {"incr": lambda: storage.incr(key, DAY), "get": lambda: storage.get(key),
                 "get_expiry": lambda: storage.get_expiry(key), "clear": lambda: storage.clear(key),
                 "acquire_sliding_window_entry": lambda: storage.acquire_sliding_window_entry(key, 5, DAY),
                 "get_sliding_window": lambda: storage.get_sliding_window(key, DAY)}
        for name, call in calls.items():
            with self.subTest(call=name), self.assertRaisesRegex(PklimitSetupError, pattern) as raised:
                call()
            self.assertIsInstance(raised.exception, ConfigurationError)
            self.assertEqual(raised.exception.__cause__.sqlstate, "42883", "the server's error")
        with self.assertLogs("pklimit", logging.DEBUG):
            self.assertFalse(storage.check())

    def test_not_installed(self):
        uri = database(MISSING)
        self.every_call_says(self.storage(uri),
                             f"not installed in database '{MISSING}': run CREATE EXTENSION pklimit")

    def test_not_installed_through_flask_limiter(self):
        app = flask.Flask("setup")
        limiter = Limiter(lambda: "x", app=app, storage_uri=database(MISSING), swallow_errors=False)
        self.addCleanup(limiter._storage.close)

        @app.route("/")
        @limiter.limit("1 per day")
        def index():
            return "ok"

        with self.assertLogs("setup", logging.ERROR) as logs:
            self.assertEqual(app.test_client().get("/").status_code, 500)
        self.assertIn("run CREATE EXTENSION pklimit", "\n".join(logs.output))

    def test_in_a_schema_off_the_search_path(self):
        uri = database(ELSEWHERE, "CREATE SCHEMA ratelimit", "CREATE EXTENSION pklimit SCHEMA ratelimit")
        self.every_call_says(self.storage(uri), "in schema 'ratelimit' of database 'pklimit_elsewhere',"
                                                " which is not on the search path: pass the storage"
                                                " option schema='ratelimit'")
        with self.assertRaisesRegex(PklimitSetupError, "not in 'public' that the option schema names"):
            self.storage(uri, schema="public").incr(unique("setup"), DAY)
        with self.assertRaisesRegex(PklimitSetupError, "not in 'nowhere' that the option schema names") \
                as raised:
            self.storage(uri, schema="nowhere").incr(unique("setup"), DAY)
        self.assertEqual(raised.exception.__cause__.sqlstate, "3F000", "no schema nowhere")
        key = unique("elsewhere")
        for storage in (self.storage(uri, schema="ratelimit"), self.storage(with_query(uri, schema="ratelimit"))):
            self.assertEqual(storage.incr(key, DAY), storage.get(key))
            self.assertTrue(storage.acquire_sliding_window_entry(key + "-sliding", 5, DAY))
            self.assertTrue(storage.check())
        self.assertEqual(storage.get(key), 2)

    def test_older_than_the_storage_needs(self):
        uri = database(OLD, "CREATE EXTENSION pklimit VERSION '0.2.0'")
        self.every_call_says_old(uri)
        # the fixed window aligned to the epoch is 0.2.0's
        storage = self.storage(uri, anchor="epoch")
        key = unique("old")
        self.assertEqual([storage.incr(key, DAY), storage.incr(key, DAY)], [1, 2])
        self.assertEqual(storage.get(key), 2)

    def every_call_says_old(self, uri):
        update = "install pklimit {0} or later on the server and run ALTER EXTENSION pklimit UPDATE in that database"
        key = unique("old")
        default = self.storage(uri)
        for call in (lambda: default.incr(key, DAY), lambda: default.get_expiry(key)):
            with self.assertRaisesRegex(PklimitSetupError,
                                        "pklimit 0.2.0 in database 'pklimit_old' is older than the option"
                                        " anchor 'first' needs \\(0.4.0\\): " + update.format("0.4.0")
                                        + ", or pass the storage option anchor='epoch'"):
                call()
        memory = self.storage(uri, anchor="epoch", durable=False)
        with self.assertRaisesRegex(PklimitSetupError, "older than the option durable false needs"
                                                       " \\(0.3.0\\): " + update.format("0.3.0") + "[^,]*$"):
            memory.incr(key, DAY)
        for call in (lambda: default.acquire_sliding_window_entry(key, 5, DAY),
                     lambda: default.get_sliding_window(key, DAY)):
            with self.assertRaisesRegex(PklimitSetupError, "older than the sliding window counter needs"
                                                           " \\(0.3.0\\)"):
                call()
        policy = self.storage(with_query(uri, policy="api"))
        for call in (lambda: policy.incr(key, DAY), lambda: policy.get(key), lambda: policy.get_expiry(key),
                     lambda: policy.clear(key)):
            with self.assertRaisesRegex(PklimitSetupError, "older than the option policy needs"
                                                           " \\(0.4.0\\): " + update.format("0.4.0") + "[^,]*$"):
                call()


if __name__ == "__main__":
    unittest.main()
