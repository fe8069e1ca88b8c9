"""What the storage keeps between calls: nothing of a key's.  Every answer
is pklimit's, read at the call, so no answer of one request can be spent
by another, and no key a client chooses grows anything in the application."""

import unittest
import urllib.parse

from limits.storage import storage_from_string

import pklimit.limits  # noqa: F401  registers the pklimit+postgresql:// scheme

from common import UNAVAILABLE_URI, URI, rows, sql, unique, with_query

DAY = 86400


def footprint(storage):
    """The storage's attributes, and the size of each that has one."""
    return {name: len(value) if hasattr(value, "__len__") else None
            for name, value in vars(storage).items()}


class State(unittest.TestCase):
    def storage(self, uri=URI, **options):
        storage = storage_from_string(uri, **options)
        self.addCleanup(storage.close)
        return storage

    def test_another_expiry_counts_in_the_open_window(self):
        storage = self.storage()
        key = unique("expiry")
        self.assertEqual(storage.incr(key, DAY), 1)
        end = storage.get_expiry(key)
        # pklimit's one state per key: a call with another window counts in
        # the open one, whose end does not move
        self.assertEqual(storage.incr(key, 60, amount=2), 3)
        self.assertEqual(storage.get_expiry(key), end)
        self.assertEqual(rows(key), [("g:" + key, 3)])

    def test_nothing_kept_per_key(self):
        storage = self.storage()
        before = footprint(storage)
        for i in range(100):
            key = unique(f"many-{i}")
            storage.incr(key, DAY, amount=2)
            storage.get(key)
            storage.get_expiry(key)
            storage.acquire_sliding_window_entry(key + "-s", 1, DAY, amount=3)  # refused
            storage.get_sliding_window(key + "-s", DAY)
            storage.clear(key)
        self.assertEqual(footprint(storage), before)
        for answer in ("allow", "deny"):
            down = self.storage(with_query(UNAVAILABLE_URI, options=urllib.parse.quote(
                f"-c pklimit.on_unavailable={answer}")))
            before = footprint(down)
            with self.assertLogs("pklimit"):
                for i in range(50):
                    key = unique(f"down-{i}")
                    down.incr(key, DAY)
                    down.acquire_sliding_window_entry(key, 1, DAY)
                    down.clear(key)
            self.assertEqual(footprint(down), before, answer)

    def test_clear_under_each_algorithm(self):
        storage = self.storage()
        fixed, sliding, gcra = unique("clear-fixed"), unique("clear-sliding"), unique("clear-gcra")
        storage.incr(fixed, DAY, amount=4)
        self.assertTrue(storage.acquire_sliding_window_entry(sliding, 5, DAY, amount=5))
        self.assertFalse(storage.acquire_sliding_window_entry(sliding, 5, DAY))
        # a key another client counts with pklimit's GCRA
        sql("SELECT pklimit_allow(%s, 5, '1 day', cost => 3, algorithm => 'gcra')", (gcra,))
        self.assertEqual(storage.get(gcra), 3)
        storage.clear(fixed)
        storage.clear_sliding_window(sliding, DAY)
        storage.clear(gcra)
        self.assertEqual([storage.get(fixed), storage.get(gcra)], [0, 0])
        self.assertEqual(storage.get_sliding_window(sliding, DAY), (0, 0.0, 0, 0.0))
        for key in (fixed, sliding, gcra):
            self.assertEqual(rows(key), [], key)
        self.assertEqual(storage.incr(fixed, DAY), 1, "a fresh window")
        self.assertTrue(storage.acquire_sliding_window_entry(sliding, 5, DAY, amount=5), "a fresh estimate")


if __name__ == "__main__":
    unittest.main()
