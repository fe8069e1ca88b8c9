"""Keys from a request can hold anything a str can: a NUL, which text
cannot store, or a surrogate, which UTF-8 cannot encode.  Each must count
on its own and never fail at the server (with swallow_errors a failing key
would not be limited at all); '%' escapes them, so it is escaped too."""

import unittest

from limits import RateLimitItemPerHour
from limits.storage import storage_from_string
from limits.strategies import FixedWindowRateLimiter

import pklimit.limits  # noqa: F401  registers the pklimit+postgresql:// scheme

from common import URI, rows, unique


class Keys(unittest.TestCase):
    def test_odd_keys_are_limited_each_on_its_own(self):
        storage = storage_from_string(URI)
        self.addCleanup(storage.close)
        limiter = FixedWindowRateLimiter(storage)
        limit = RateLimitItemPerHour(2)
        base = unique("odd")
        # '%00' and '%25' written out, beside the characters they escape
        keys = [base + "\x00", base + "\ud800", base + "\udc00", base + "\ufffd", base + "%00", base + "%",
                base + "%25"]
        for key in keys:
            with self.subTest(key=repr(key)):
                self.assertEqual([limiter.hit(limit, key) for _ in range(3)], [True, True, False])
        self.assertEqual(len(rows(base)), len(keys), "one row per key")
        stored = [k for k, _ in rows(base)]
        self.assertTrue(any(base + "%uD800/" in k for k in stored), stored)
