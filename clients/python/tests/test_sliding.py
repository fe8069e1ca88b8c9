"""The sliding window counter (limits 4.1 and later): pklimit's algorithm
'sliding', the estimate limits' own storages make, decided in one call on
the key's row."""

import concurrent.futures
import importlib.metadata
import unittest

import flask
from flask_limiter import Limiter
from limits import parse
from limits.errors import ConfigurationError
from limits.strategies import STRATEGIES
from limits.storage import storage_from_string

import pklimit.limits  # noqa: F401  registers the pklimit+postgresql:// scheme

from common import URI, clock, rows, sql, unique, until

DAY = 86400

try:
    from limits.storage import SlidingWindowCounterSupport
    from limits.strategies import SlidingWindowCounterRateLimiter
except ImportError:  # before limits 4.1
    SlidingWindowCounterSupport = SlidingWindowCounterRateLimiter = None


def stored_estimate(key):
    """pklimit's estimate of the key, read in SQL."""
    return sql("SELECT pklimit_count(%s)", (key,))[0][0]


class Sliding(unittest.TestCase):
    def setUp(self):
        self.storage = storage_from_string(URI)
        self.addCleanup(self.storage.close)

    def test_offered_where_limits_has_it(self):
        version = tuple(int(p) for p in importlib.metadata.version("limits").split(".")[:2])
        self.assertEqual(SlidingWindowCounterRateLimiter is not None, version >= (4, 1), version)
        if SlidingWindowCounterRateLimiter is not None:
            self.assertIsInstance(self.storage, SlidingWindowCounterSupport)
            SlidingWindowCounterRateLimiter(self.storage)

    def test_amounts_above_one(self):
        key = unique("amounts")
        acquire = self.storage.acquire_sliding_window_entry
        self.assertFalse(acquire(key, 10, DAY, amount=11))
        self.assertEqual(rows(key), [], "a refusal records nothing")
        self.assertTrue(acquire(key, 10, DAY, amount=5))
        self.assertFalse(acquire(key, 10, DAY, amount=6))
        self.assertEqual(stored_estimate(key), 5, "the refused 6 took nothing")
        self.assertTrue(acquire(key, 10, DAY, amount=5))
        self.assertFalse(acquire(key, 10, DAY))
        self.assertEqual(rows(key), [("g:" + key, 10)])

    def test_concurrent_acquires_exact(self):
        key = unique("race")
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(
                lambda _: self.storage.acquire_sliding_window_entry(key, 10, DAY, amount=3), range(20)))
        self.assertEqual(answers.count(True), 3)
        self.assertEqual(rows(key), [("g:" + key, 9)], "no refusal counted, nothing to take back")

    def test_window(self):
        key = unique("window")
        self.assertEqual(self.storage.get_sliding_window(key, DAY), (0, 0.0, 0, 0.0))
        self.storage.acquire_sliding_window_entry(key, 10, DAY, amount=4)
        now = clock()
        previous, previous_ttl, current, current_ttl = self.storage.get_sliding_window(key, DAY)
        self.assertEqual((previous, previous_ttl, current), (0, 0.0, 4))
        # only the current window counts: the next event is freed when it ends
        window_end = (now // DAY + 1) * DAY
        self.assertLessEqual(current_ttl, window_end - now)
        self.assertGreater(current_ttl, window_end - clock() - 1)

    def test_next_event_freed_by_the_previous_window(self):
        # 3 events in one 4 s window; in the next, pklimit's estimate
        # 3 * (4 - e) / 4 falls to 2 at e = 4/3 s: one event is freed then
        key = unique("previous")
        self.assertTrue(self.storage.acquire_sliding_window_entry(key, 5, 4, amount=3))
        next_window = (clock() // 4 + 1) * 4
        until(lambda: clock() >= next_window, "the next window")
        now = clock()
        _, _, estimate, reset_in = self.storage.get_sliding_window(key, 4)
        self.assertEqual(estimate, 3)
        self.assertAlmostEqual(now - next_window + reset_in, 4 / 3, delta=0.1)

    def test_strategy(self):
        if SlidingWindowCounterRateLimiter is None:
            self.assertNotIn("sliding-window-counter", STRATEGIES)
            return
        limiter = SlidingWindowCounterRateLimiter(self.storage)
        item = parse("3 per day")
        key = unique("strategy")
        self.assertEqual([limiter.hit(item, key) for _ in range(5)], [True] * 3 + [False] * 2)
        self.assertFalse(limiter.test(item, key))
        stats = limiter.get_window_stats(item, key)
        self.assertEqual(stats.remaining, 0)
        self.assertEqual(stored_estimate(item.key_for(key)), 3, "refused hits are not counted")
        limiter.clear(item, key)
        self.assertEqual(limiter.get_window_stats(item, key).remaining, 3)
        self.assertTrue(limiter.test(item, key, cost=3))
        self.assertFalse(limiter.test(item, key, cost=4))

    def test_flask_limiter(self):
        app = flask.Flask("sliding")
        client = unique("flask")

        def limiter():
            return Limiter(lambda: client, app=app, storage_uri=URI, headers_enabled=True,
                           strategy="sliding-window-counter")

        if SlidingWindowCounterRateLimiter is None:
            with self.assertRaisesRegex(ConfigurationError, "sliding-window-counter"):
                limiter()
            return
        sliding = limiter()
        self.addCleanup(sliding._storage.close)

        @app.route("/")
        @sliding.limit("2 per hour")
        def index():
            return "ok"

        answers = [app.test_client().get("/") for _ in range(3)]
        self.assertEqual([a.status_code for a in answers], [200, 200, 429])
        self.assertEqual([a.headers["X-RateLimit-Remaining"] for a in answers], ["1", "0", "0"])


if __name__ == "__main__":
    unittest.main()
