"""The storage's methods called directly, as limits' strategies call them."""

import importlib.metadata
import logging
import os
import sys
import time
import unittest

import flask
import limits.errors
import psycopg
from flask_limiter import Limiter
from limits import parse
from limits.errors import ConfigurationError
from limits.storage import SCHEMES, MovingWindowSupport, storage_from_string
from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

import pklimit
import pklimit.limits
from pklimit.limits import PklimitStorage, using_tenant

from common import URI, clock, rows, sql, unique, until, wait_for_room, window_end, with_query

DAY = 86400


class StorageTest(unittest.TestCase):
    def setUp(self):
        self.storage = storage_from_string(URI)
        self.addCleanup(self.storage.close)

    def test_installed_package_is_used(self):
        self.assertTrue(os.path.realpath(pklimit.__file__).startswith(os.path.realpath(sys.prefix)),
                        f"pklimit imported from {pklimit.__file__}, not the venv {sys.prefix}")

    def test_schemes_registered_by_import(self):
        for scheme in ("pklimit+postgresql", "pklimit+postgres", "pklimit"):
            self.assertIs(SCHEMES.get(scheme), PklimitStorage, scheme)
        self.assertNotIsInstance(self.storage, MovingWindowSupport)

    def test_typed(self):
        # PEP 561: the installed package says its annotations are to be read
        self.assertTrue(os.path.isfile(os.path.join(os.path.dirname(pklimit.__file__), "py.typed")))

    def test_wrap_exceptions(self):
        # limits 3.8 and later wrap a storage's base_exceptions in
        # StorageError when asked; before, there is no StorageError
        port = sql("SELECT setting FROM pg_settings WHERE name = 'port'")[0][0]
        down = with_query(URI, port=int(port) + 7919, pool_timeout=0.2)
        if hasattr(limits.errors, "StorageError"):
            storage = storage_from_string(down, wrap_exceptions=True)
            self.addCleanup(storage.close)
            self.assertIs(storage.base_exceptions, psycopg.Error)
            with self.assertRaises(limits.errors.StorageError) as raised:
                storage.incr(unique("wrap"), DAY)
            self.assertIsInstance(raised.exception.storage_error, psycopg.Error)
        else:
            with self.assertRaisesRegex(ConfigurationError, "limits 3.8"):
                storage_from_string(down, wrap_exceptions=True)
        storage = storage_from_string(down)
        self.addCleanup(storage.close)
        with self.assertRaises(psycopg.Error, msg="unwrapped by default"):
            storage.incr(unique("wrap"), DAY)

    def test_every_scheme_counts_in_the_same_database(self):
        key = unique("scheme")
        tail = URI.split("://", 1)[1]
        counts = []
        for uri in ("pklimit+postgresql://" + tail, "pklimit+postgres://" + tail, "pklimit://"):
            storage = storage_from_string(uri)  # pklimit:// alone: libpq's PG* environment
            self.addCleanup(storage.close)
            counts.append(storage.incr(key, DAY))
        self.assertEqual(counts, [1, 2, 3])

    def test_incr_returns_the_count_after(self):
        key = unique("incr")
        self.assertEqual(self.storage.incr(key, DAY), 1)
        self.assertEqual(self.storage.incr(key, DAY, amount=5), 6)
        self.assertEqual(self.storage.incr(key, DAY), 7)
        self.assertEqual(self.storage.get(key), 7)
        self.assertEqual(rows(key), [("g:" + key, 7)])

    def test_amount_zero_records_nothing(self):
        key = unique("zero")
        self.assertEqual(self.storage.incr(key, DAY, amount=0), 0)
        self.assertEqual(rows(key), [])
        self.storage.incr(key, DAY, amount=2)
        self.assertEqual(self.storage.incr(key, DAY, amount=0), 2)

    def test_strategy_counts_refused_hits(self):
        key = unique("strategy")
        limiter = FixedWindowRateLimiter(self.storage)
        item = parse("3 per day")
        self.assertEqual([limiter.hit(item, key) for _ in range(5)], [True] * 3 + [False] * 2)
        self.assertFalse(limiter.test(item, key))
        reset, remaining = limiter.get_window_stats(item, key)
        self.assertEqual(remaining, 0)
        self.assertEqual(self.storage.get(item.key_for(key)), 5, "every hit counts, refused ones too")

    def test_get_of_unknown_key_is_zero(self):
        self.assertEqual(self.storage.get(unique("never")), 0)

    def test_a_window_starts_at_the_first_hit(self):
        key = unique("first")
        for seconds in (DAY, 2):
            opened = clock()
            self.assertEqual(self.storage.incr(key + str(seconds), seconds), 1)
            opened = (opened, clock())
            end = self.storage.get_expiry(key + str(seconds))
            self.assertGreaterEqual(end, int(opened[0] + seconds), "the first hit's moment + the window")
            self.assertLessEqual(end, opened[1] + seconds)
        short = key + "2"  # the 2 s window, opened last
        self.assertEqual(self.storage.incr(short, 2, amount=3), 4)
        self.assertEqual(self.storage.get_expiry(short), end, "the window stays the first hit's")
        until(lambda: clock() >= opened[1] + 2, "the window's end")
        self.assertEqual(self.storage.incr(short, 2), 1, "a new window, from its own first hit")

    def test_get_expiry_is_the_epoch_aligned_window_end_with_anchor_epoch(self):
        storage = storage_from_string(with_query(URI, anchor="epoch"))
        self.addCleanup(storage.close)
        key = unique("expiry")
        for seconds in (3600, DAY):
            wait_for_room(seconds, need=30)
            before = window_end(seconds)
            storage.incr(key + str(seconds), seconds)
            expiry = storage.get_expiry(key + str(seconds))
            self.assertEqual(expiry, before)
            self.assertEqual(expiry % seconds, 0, "aligned to the epoch")

    def test_get_expiry_is_of_the_type_limits_declares(self):
        # limits' storages answer an int before 4.0 (its own tests compare
        # get_window_stats with int(time.time())), a float from 4.0 on
        declared = int if int(importlib.metadata.version("limits").split(".")[0]) < 4 else float
        key = unique("type")
        self.storage.incr(key, DAY)
        for expiry in (self.storage.get_expiry(key), self.storage.get_expiry(unique("never"))):
            self.assertIs(type(expiry), declared)

    def test_get_expiry_of_unknown_key_is_now(self):
        before = int(time.time())
        expiry = self.storage.get_expiry(unique("never"))
        self.assertGreaterEqual(expiry, before)
        self.assertLessEqual(expiry, time.time())

    def test_clear_forgets_the_count(self):
        key = unique("clear")
        self.storage.incr(key, DAY, amount=4)
        self.assertIsNone(self.storage.clear(key))
        self.assertEqual(self.storage.get(key), 0)
        self.assertEqual(rows(key), [])
        self.assertEqual(self.storage.incr(key, DAY), 1)
        self.storage.clear(unique("never"))  # no count: nothing to do, no error

    def test_check(self):
        self.assertTrue(self.storage.check())
        port = sql("SELECT setting FROM pg_settings WHERE name = 'port'")[0][0]
        down = storage_from_string(with_query(URI, port=int(port) + 7919, pool_timeout=1))
        self.addCleanup(down.close)
        self.assertFalse(down.check())

    def test_reset_is_not_supported(self):
        key = unique("reset")
        self.storage.incr(key, DAY)
        with self.assertRaises(NotImplementedError):
            self.storage.reset()
        app = flask.Flask("reset")
        limiter = Limiter(lambda: "x", app=app, storage_uri=URI)
        with self.assertLogs("flask-limiter", logging.WARNING) as logs:
            limiter.reset()
        self.assertIn("does not support being reset", "\n".join(logs.output))
        self.assertEqual(self.storage.get(key), 1, "reset deleted nothing")

    def test_elastic_expiry_is_refused(self):
        key = unique("elastic")
        with self.assertRaisesRegex(ConfigurationError, "elastic expiry"):
            self.storage.incr(key, DAY, elastic_expiry=True)
        self.assertEqual(rows(key), [], "nothing recorded")

    def test_moving_window_is_not_offered(self):
        with self.assertRaises(NotImplementedError):
            MovingWindowRateLimiter(self.storage)
        with self.assertRaises(NotImplementedError):
            Limiter(lambda: "x", app=flask.Flask("moving"), storage_uri=URI,
                    strategy="moving-window")

    def test_uri_options(self):
        storage = storage_from_string(with_query(URI, pool_max_size=2, pool_min_size=1,
                                                 pool_timeout=3, application_name="pklimit-test"))
        self.addCleanup(storage.close)
        self.assertEqual((storage.pool.min_size, storage.pool.max_size, storage.pool.timeout),
                         (1, 2, 3.0))
        with storage.pool.connection() as conn:
            self.assertEqual(conn.execute("SELECT current_setting('application_name')").fetchone()[0],
                             "pklimit-test")
            self.assertTrue(conn.autocommit)
            self.assertIsNone(conn.prepare_threshold)

    def test_storage_options_override(self):
        storage = storage_from_string(URI, pool_max_size=3, application_name="from-options")
        self.addCleanup(storage.close)
        self.assertEqual(storage.pool.max_size, 3)
        with storage.pool.connection() as conn:
            self.assertEqual(conn.execute("SELECT current_setting('application_name')").fetchone()[0],
                             "from-options")

    def test_no_prepared_statements(self):
        key = unique("prepared")
        storage = storage_from_string(with_query(URI, pool_max_size=1, pool_min_size=1))
        self.addCleanup(storage.close)
        for _ in range(10):
            storage.incr(key, DAY)
            storage.get(key)
            storage.get_expiry(key)
        with storage.pool.connection() as conn:
            self.assertEqual(conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0], 0)

    def test_bad_scheme(self):
        with self.assertRaises(ConfigurationError):
            PklimitStorage("postgresql://localhost/db")


class TenantTest(unittest.TestCase):
    def test_tenants_never_meet(self):
        key = unique("tenant")
        current = {"value": "acme"}
        storage = storage_from_string(URI, tenant=lambda: current["value"])
        self.addCleanup(storage.close)
        self.assertEqual(storage.incr(key, DAY), 1)
        self.assertEqual(storage.incr(key, DAY), 2)
        current["value"] = "globex"
        self.assertEqual(storage.incr(key, DAY), 1)
        self.assertEqual(storage.get(key), 1)
        current["value"] = None
        self.assertEqual(storage.incr(key, DAY), 1)
        current["value"] = "acme"
        self.assertEqual(storage.get(key), 2)
        storage.clear(key)
        current["value"] = "globex"
        self.assertEqual(storage.get(key), 1, "clear forgot acme's count only")
        self.assertEqual(rows(key), [("g:" + key, 1), ("t6:globex:" + key, 1)])

    def test_context_variable(self):
        key = unique("ctx")
        storage = storage_from_string(URI)
        self.addCleanup(storage.close)
        with using_tenant("acme"):
            storage.incr(key, DAY)
            with using_tenant("a:b"):
                storage.incr(key, DAY, amount=2)
            storage.incr(key, DAY)
        storage.incr(key, DAY, amount=5)
        self.assertEqual(rows(key), [("g:" + key, 5), ("t3:a:b:" + key, 2), ("t4:acme:" + key, 2)])

    def test_no_tenant_leaks_on_the_pooled_connection(self):
        key = unique("leak")
        current = {"value": "acme"}
        storage = storage_from_string(with_query(URI, pool_min_size=1, pool_max_size=1),
                                      tenant=lambda: current["value"])
        self.addCleanup(storage.close)
        with storage.pool.connection() as conn:
            pid = conn.info.backend_pid
        storage.incr(key, DAY)
        storage.get(key)
        storage.get_expiry(key)
        with storage.pool.connection() as conn:
            self.assertEqual(conn.info.backend_pid, pid, "one server connection throughout")
            self.assertIn(conn.execute("SELECT current_setting('platformkit.tenant', true)").fetchone()[0],
                          ("", None))
        current["value"] = ""
        self.assertEqual(storage.incr(key, DAY), 1, "the next call without a tenant is global")
        self.assertEqual(rows(key), [("g:" + key, 1), ("t4:acme:" + key, 1)])

    def test_one_statement_per_call(self):
        key = unique("statements")
        storage = storage_from_string(URI, tenant="acme")
        self.addCleanup(storage.close)
        sent = []
        storage.pool.open(wait=True)
        original = psycopg.Connection.execute

        def counting(conn, query, *args, **kwargs):
            sent.append(query)
            return original(conn, query, *args, **kwargs)

        psycopg.Connection.execute = counting
        try:
            storage.incr(key, DAY)
            storage.get(key)
            storage.get_expiry(key)
            storage.clear(key)
        finally:
            psycopg.Connection.execute = original
        self.assertEqual(len(sent), 4)


if __name__ == "__main__":
    unittest.main()
