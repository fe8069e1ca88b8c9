"""The option durable: false takes pklimit's memory path (docs/memory.md):
as exact as the durable path, decided in shared memory, in the table
within pklimit.flush_interval.  Through the storage and flask-limiter."""

import concurrent.futures
import time
import unittest

import psycopg
from limits.errors import ConfigurationError
from limits.storage import storage_from_string

from app import create_app
from common import (POOLER_URI, URI, clock, flushed, memory_stats, rows, sql, unique, until,
                    with_query)
from test_flask import Served, exact_429_and_headers, get

DAY = 86400


def exact_count(stored_key):
    """pklimit_count, exact on both paths before any flush (no tenant)."""
    return sql("SELECT pklimit_count(%s)", (stored_key,))[0][0]


def sent_statements(storage):
    """The SQL of each statement the storage sends in the block, as text."""

    class Recorder:
        def __init__(self):
            self.sent = []

        def __enter__(self):
            self.original = psycopg.Connection.execute
            original, sent = self.original, self.sent

            def recording(conn, query, *args, **kwargs):
                sent.append(query.as_string(conn) if hasattr(query, "as_string") else query)
                return original(conn, query, *args, **kwargs)

            storage.pool.open(wait=True)
            psycopg.Connection.execute = recording
            return self.sent

        def __exit__(self, *exc):
            psycopg.Connection.execute = self.original

    return Recorder()


class DurableOption(unittest.TestCase):
    def storage(self, uri=URI, **options):
        storage = storage_from_string(uri, **options)
        self.addCleanup(storage.close)
        return storage

    def test_default_is_durable(self):
        self.assertIs(self.storage().durable, True)

    def test_uri_and_storage_options(self):
        for value, durable in (("false", False), ("False", False), ("0", False), ("no", False),
                               ("true", True), ("TRUE", True), ("1", True), ("yes", True)):
            with self.subTest(uri=value):
                self.assertIs(self.storage(with_query(URI, durable=value)).durable, durable)
        self.assertIs(self.storage(durable=False).durable, False)
        self.assertIs(self.storage(durable="no").durable, False)
        self.assertIs(self.storage(with_query(URI, durable="false"), durable=True).durable, True,
                      "storage_options win over the URI")

    def test_bad_values_are_refused(self):
        for value in ("maybe", "", "2", "on", "f", " false"):
            with self.subTest(uri=value), self.assertRaisesRegex(ConfigurationError, "durable must be"):
                storage_from_string(with_query(URI, durable=value))
        for value in (None, 0, 1, "off", [False]):
            with self.subTest(option=value), self.assertRaisesRegex(ConfigurationError, "durable must be"):
                storage_from_string(URI, durable=value)

    def test_durable_is_not_passed_to_libpq(self):
        storage = self.storage(with_query(URI, durable="false", application_name="memory-test"))
        with storage.pool.connection() as conn:
            self.assertEqual(conn.execute("SELECT current_setting('application_name')").fetchone()[0],
                             "memory-test")

    def test_the_sql_sent(self):
        for durable, anchor in ((False, "first"), (True, "first"), (True, "epoch"), (False, "epoch")):
            storage = self.storage(durable=durable, anchor=anchor)
            key = unique("sql")
            with sent_statements(storage) as sent:
                storage.incr(key, DAY)
                storage.get(key)
                storage.get_expiry(key)
                storage.clear(key)
                storage.acquire_sliding_window_entry(key, 5, DAY)
                storage.get_sliding_window(key, DAY)
            self.assertEqual(len(sent), 6)
            incr, count, peek, forget, acquire, window = sent
            # durable => false and anchor => 'first' only when they are not
            # the server's defaults, so that anchor 'epoch' runs on any
            # pklimit from 0.3.0 on; the anchor only for the fixed window
            for statement in (incr, peek, acquire, window):
                if durable:
                    self.assertNotIn("durable", statement)
                else:
                    self.assertIn("durable => false", statement)
            for statement in (incr, peek):
                if anchor == "first":
                    self.assertIn("anchor => 'first'", statement)
                else:
                    self.assertNotIn("anchor", statement)
            for statement in (acquire, window):
                self.assertIn("algorithm => 'sliding'", statement)
                self.assertNotIn("anchor", statement, "pklimit refuses anchor 'first' for 'sliding'")
            self.assertIn("cost => 0", peek)
            self.assertIn("record_refused => false", acquire)
            for other in (count, forget):
                self.assertNotIn("durable", other, "pklimit_count and pklimit_forget are exact on both paths")

    def test_pklimit_decides_in_memory(self):
        storage = self.storage(with_query(URI, durable="false"))
        key = unique("stats")
        calls, reads = memory_stats()
        self.assertEqual(storage.incr(key, DAY), 1)
        # the first hit reads the key into memory (its row as committed) and
        # is decided there, as the later ones and the peek's are: the flush
        # writes it
        until(lambda: storage.get_expiry(key) and memory_stats()[0] > calls, "a call decided in memory")
        self.assertGreater(memory_stats()[1], reads, "the key was read into memory")
        until(lambda: rows(key) == [("g:" + key, 1)], "the flush of the first hit")
        self.assertEqual(storage.incr(key, DAY, amount=2), 3)
        until(lambda: rows(key) == [("g:" + key, 3)], "the flush of 3 hits")

    def test_peek_count_and_clear_in_memory(self):
        storage = self.storage(durable=False)
        key = unique("clear")
        before = int(time.time())
        self.assertGreaterEqual(storage.get_expiry(key), before, "no open window: now")
        self.assertEqual(storage.get(key), 0)
        flushed()
        self.assertEqual(rows(key), [], "a peek creates no row, even after a flush")
        opened = clock()
        self.assertEqual([storage.incr(key, DAY) for _ in range(3)], [1, 2, 3])
        opened = (opened, clock())
        self.assertEqual(storage.incr(key, DAY, amount=2), 5)
        self.assertEqual(storage.get(key), 5, "get: every hit, before a flush")
        end = storage.get_expiry(key)
        self.assertGreaterEqual(end, int(opened[0] + DAY), "a day after the first hit")
        self.assertLessEqual(end, opened[1] + DAY)
        until(lambda: rows(key) == [("g:" + key, 5)], "the flush of 5 hits")
        storage.clear(key)
        self.assertEqual(storage.get(key), 0)
        self.assertEqual(rows(key), [], "clear deleted the row")
        flushed()
        self.assertEqual(rows(key), [], "and no flush wrote it back")
        self.assertEqual(storage.incr(key, DAY), 1, "a fresh count")


class MemoryReplicas(unittest.TestCase):
    """flask-limiter on two replicas, durable false in the URI."""

    uri = with_query(URI, durable="false")

    def replicas(self, limit):
        served = [Served(create_app(self.uri, limit, name=f"memory-{i}")) for i in "ab"]
        for s in served:
            self.addCleanup(s.stop)
        return [s.base for s in served]

    def test_concurrent_requests_exact(self):
        client = unique("memory-burst")
        bases = self.replicas("10 per day")
        calls, _ = memory_stats()
        # the first hit reads the key into memory; the flush writes it
        self.assertEqual(get(bases[0], client)[0], 200)
        until(lambda: len(rows(client)) == 1, "the flush of the first hit")
        (stored, first), = rows(client)
        self.assertEqual(first, 1)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda i: get(bases[i % 2], client)[0], range(39)))
        self.assertEqual(statuses.count(200), 9)
        self.assertEqual(statuses.count(429), 30)
        self.assertEqual(exact_count(stored[len("g:"):]), 40, "pklimit_count sees every hit at once")
        until(lambda: [c for _, c in rows(client)] == [40], "the flush of 40 hits")
        self.assertGreater(memory_stats()[0], calls, "calls were decided in memory")

    def test_exact_429_and_headers_across_replicas(self):
        client = unique("memory-headers")
        exact_429_and_headers(self, *self.replicas("5 per hour"), client)
        until(lambda: [c for _, c in rows(client)] == [7], "the flush of 7 hits")


class MemoryThroughPgbouncer(MemoryReplicas):
    """The same through pgbouncer in transaction pooling mode."""

    uri = with_query(POOLER_URI, durable="false")


if __name__ == "__main__":
    unittest.main()
