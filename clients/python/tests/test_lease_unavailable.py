"""pklimit.lease when pklimit cannot be reached, on a node where no worker
can start (every call answers no_worker at once): allow runs the block on a
token that is no lease, deny refuses with LeaseRefused, error raises."""

import logging
import unittest
import urllib.parse

import psycopg

import pklimit
from common import UNAVAILABLE_URI, libpq, unique, with_query


def connect(on_unavailable):
    """An autocommit connection to the unavailable node, this session's
    pklimit.on_unavailable set through libpq's options parameter."""
    uri = with_query(UNAVAILABLE_URI, options=urllib.parse.quote(f"-c pklimit.on_unavailable={on_unavailable}"))
    return psycopg.connect(libpq(uri), autocommit=True)


class LeaseUnavailable(unittest.TestCase):
    def test_allow_runs_on_a_token_that_is_no_lease(self):
        with connect("allow") as conn:
            with self.assertLogs("pklimit", logging.WARNING) as logs:
                with pklimit.lease(conn, unique("allow"), 1, "1 minute") as held:
                    self.assertIsNotNone(held.token)
                    self.assertFalse(held.is_lease)
                    self.assertEqual((held.status, held.held), ("no_worker", None))
                    self.assertFalse(held.renew(), "nothing to renew")
            self.assertIn("store unavailable (no_worker)", "\n".join(logs.output))
            self.assertIn("answered allow", "\n".join(logs.output))
            self.assertIsNone(held.token, "released on leaving, once")
            self.assertFalse(held.release())

    def test_deny_refuses_without_retry_after(self):
        with connect("deny") as conn:
            with self.assertLogs("pklimit", logging.WARNING):
                with self.assertRaises(pklimit.LeaseRefused) as refused:
                    with pklimit.lease(conn, unique("deny"), 1, "1 minute"):
                        self.fail("no lease")
        error = refused.exception
        self.assertEqual((error.status, error.held, error.retry_after, error.max_concurrent),
                         ("no_worker", None, None, 1))
        self.assertIn("unavailable (no_worker)", str(error))

    def test_error_raises_the_reason(self):
        with connect("error") as conn:
            with self.assertRaises(psycopg.Error) as raised:
                with pklimit.lease(conn, unique("error"), 1, "1 minute"):
                    self.fail("no lease")
        self.assertEqual(raised.exception.sqlstate, "53000")


if __name__ == "__main__":
    unittest.main()
