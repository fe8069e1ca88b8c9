"""The option policy (pklimit 0.4.0): a limit named in the database decides
each hit, and a change to it applies to the next request.  Through
flask-limiter and the storage's methods."""

import time
import unittest

import psycopg
from limits import parse
from limits.errors import ConfigurationError
from limits.storage import storage_from_string
from limits.strategies import FixedWindowRateLimiter

from app import create_app
from common import URI, rows, sql, unique, with_query
from test_flask import Served, get

HOUR = 3600


def set_policy(name, max_count, **named):
    """A policy of max_count per hour, a fixed window from a key's first hit
    (no hour boundary resets a count mid-test), with more named arguments."""
    if "algorithm" not in named:
        named.setdefault("anchor", "first")
    extra = "".join(f", {k} => %s" for k in named)
    sql(f"SELECT pklimit_policy_set(%s::text, %s::bigint, '1 hour'{extra})", (name, max_count, *named.values()))


def stored_prefix(policy):
    return f"p{len(policy.encode())}:{policy}:"


class Policy(unittest.TestCase):
    def storage(self, policy, uri=URI, **options):
        storage = storage_from_string(with_query(uri, policy=policy), **options)
        self.addCleanup(storage.close)
        return storage

    def served(self, policy, limit, **options):
        served = Served(create_app(URI, limit, name=f"policy-{policy}", policy=policy, **options))
        self.addCleanup(served.stop)
        return served.base

    def test_within_the_limit_allowed_past_it_429_with_the_headers(self):
        policy, client = unique("api"), unique("policy")
        set_policy(policy, 3)
        base = self.served(policy, "3 per hour")
        started = time.time()
        answers = [get(base, client) for _ in range(5)]
        self.assertEqual([status for status, _ in answers], [200, 200, 200, 429, 429])
        self.assertEqual([h["X-RateLimit-Remaining"] for _, h in answers], ["2", "1", "0", "0", "0"])
        self.assertEqual({h["X-RateLimit-Limit"] for _, h in answers}, {"3"})
        self.assertGreater(int(answers[4][1]["Retry-After"]), HOUR - 100)
        self.assertLessEqual(int(answers[4][1]["X-RateLimit-Reset"]), started + HOUR + 2)
        (key, count), = rows(client)
        self.assertTrue(key.startswith(stored_prefix(policy) + "g:LIMITER/" + client), key)
        self.assertEqual(count, 5, "counted under the policy, refusals too")

    def test_the_policy_refuses_whatever_the_limit_string(self):
        policy, client = unique("higher"), unique("higher")
        set_policy(policy, 2)
        base = self.served(policy, "100 per minute")
        self.assertEqual([get(base, client)[0] for _ in range(3)], [200, 200, 429])

    def test_a_change_by_the_dba_applies_to_the_next_request(self):
        policy, client = unique("changed"), unique("changed")
        set_policy(policy, 5)
        # one connection, whose cached policy the change must drop
        base = self.served(policy, "100 per hour", pool_max_size=1, pool_min_size=1)
        self.assertEqual([get(base, client)[0] for _ in range(2)], [200, 200])
        set_policy(policy, 2)
        self.assertEqual(get(base, client)[0], 429, "lowered: 3 hits are over 2")
        set_policy(policy, 10)
        self.assertEqual(get(base, client)[0], 200, "raised")
        self.assertEqual(rows(client)[0][1], 4)

    def test_a_tenants_override_decides_its_calls(self):
        policy, client = unique("tenant"), unique("tenant")
        set_policy(policy, 3)
        set_policy(policy, 1, tenant="acme")
        base = self.served(policy, "3 per hour")
        self.assertEqual([get(base, client, "acme")[0] for _ in range(2)], [200, 429])
        self.assertEqual([get(base, client, "globex")[0] for _ in range(2)], [200, 200])
        self.assertEqual([get(base, client)[0] for _ in range(2)], [200, 200])

    def test_get_get_expiry_and_clear_under_the_policy(self):
        policy, key = unique("clear"), unique("clear")
        set_policy(policy, 5)
        storage = self.storage(policy)
        opened = time.time()
        self.assertEqual([storage.incr(key, 60) for _ in range(3)], [1, 2, 3])
        self.assertEqual(storage.get(key), 3)
        self.assertGreater(storage.get_expiry(key), opened + HOUR - 60, "the policy's hour, not expiry")
        self.assertEqual(rows(key), [(stored_prefix(policy) + "g:" + key, 3)])
        storage.clear(key)
        self.assertEqual((storage.get(key), rows(key)), (0, []))
        self.assertEqual(storage.incr(key, 60), 1)
        plain = storage_from_string(URI)
        self.addCleanup(plain.close)
        self.assertEqual(plain.incr(key, 60), 1, "the key without the policy is counted apart")

    def test_cost_one_is_the_policys_another_replaces_it(self):
        policy, key = unique("cost"), unique("cost")
        set_policy(policy, 10, cost=2)
        storage = self.storage(policy)
        self.assertEqual(storage.incr(key, 60), 2)
        self.assertEqual(storage.incr(key, 60, amount=3), 5)

    def test_shadow_mode_lets_refusals_through(self):
        policy, key = unique("shadow"), unique("shadow")
        set_policy(policy, 1, mode="shadow")
        limiter = FixedWindowRateLimiter(self.storage(policy))
        self.assertEqual([limiter.hit(parse("1 per hour"), key) for _ in range(3)], [True] * 3)
        self.assertEqual(limiter.get_window_stats(parse("1 per hour"), key)[1], 0)
        self.assertEqual(rows(key)[0][1], 3)

    def test_an_unknown_or_dropped_policy_is_an_error_never_an_allow(self):
        policy, client = unique("dropped"), unique("dropped")
        set_policy(policy, 5)
        base = self.served(policy, "5 per hour")
        self.assertEqual(get(base, client)[0], 200)
        self.assertEqual(sql("SELECT pklimit_policy_drop(%s::text)", (policy,)), [(True,)])
        self.assertEqual(get(base, client)[0], 500)
        storage = self.storage(unique("never-made"))
        for call in (lambda: storage.incr("k", 60), lambda: storage.get("k"),
                     lambda: storage.get_expiry("k"), lambda: storage.clear("k")):
            with self.assertRaisesRegex(psycopg.errors.UndefinedObject, 'policy ".*" does not exist'):
                call()
        self.assertFalse(storage.check())

    def test_options(self):
        self.assertEqual(self.storage("api").policy, "api")
        self.assertEqual(storage_from_string(URI, policy="api").policy, "api")
        self.assertIsNone(storage_from_string(URI).policy)
        for name, value in (("durable", "false"), ("anchor", "first")):
            with self.subTest(uri=name), self.assertRaisesRegex(
                    ConfigurationError, f"{name} cannot be given with policy: the policy 'api' decides it"):
                storage_from_string(with_query(URI, policy="api", **{name: value}))
            with self.subTest(option=name), self.assertRaisesRegex(ConfigurationError, "cannot be given"):
                storage_from_string(URI, policy="api", **{name: value})
        for value in ("", "x" * 64, "é" * 32, 42):
            with self.subTest(policy=value), self.assertRaisesRegex(ConfigurationError, "1 to 63 bytes"):
                storage_from_string(URI, policy=value)
        storage = self.storage("api")
        if hasattr(storage, "acquire_sliding_window_entry"):  # limits 4.1 and later
            with self.assertRaisesRegex(ConfigurationError, "strategy 'fixed-window'"):
                storage.acquire_sliding_window_entry("k", 5, 60)


if __name__ == "__main__":
    unittest.main()
