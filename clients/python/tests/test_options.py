"""The storage's options: a name neither the storage nor libpq knows is
refused when the storage is made, not left to libpq at each connection
(where the pool would only time out)."""

import unittest

from limits.errors import ConfigurationError
from limits.storage import storage_from_string

import pklimit.limits  # noqa: F401  registers the pklimit+postgresql:// scheme

from common import URI, sql, unique, with_query

DAY = 86400


class Options(unittest.TestCase):
    def storage(self, uri=URI, **options):
        storage = storage_from_string(uri, **options)
        self.addCleanup(storage.close)
        return storage

    def test_mis_cased_names_are_refused_at_once(self):
        for name, meant in (("Durable", "durable"), ("DURABLE", "durable"), ("Anchor", "anchor"),
                            ("Pool_Max_Size", "pool_max_size"), ("SSLMode", "sslmode"),
                            ("Application_Name", "application_name")):
            with self.subTest(uri=name), \
                    self.assertRaisesRegex(ConfigurationError, f"did you mean '{meant}'"):
                storage_from_string(with_query(URI, **{name: "false"}))
            with self.subTest(option=name), \
                    self.assertRaisesRegex(ConfigurationError, f"did you mean '{meant}'"):
                storage_from_string(URI, **{name: "false"})
        for name, meant in (("Tenant", "tenant"), ("Schema", "schema"), ("Pool", "pool")):
            with self.subTest(option=name), \
                    self.assertRaisesRegex(ConfigurationError, f"did you mean '{meant}'"):
                storage_from_string(URI, **{name: "x"})

    def test_unknown_names_are_refused_at_once(self):
        with self.assertRaisesRegex(ConfigurationError, "'durability'.*neither the storage's nor"):
            storage_from_string(with_query(URI, durability="false"))
        with self.assertRaisesRegex(ConfigurationError, "'timeout'.*neither the storage's nor"):
            storage_from_string(URI, timeout=5)
        with self.assertRaisesRegex(ConfigurationError, "pool_timeout must be a number"):
            storage_from_string(with_query(URI, pool_timeout="soon"))

    def test_libpq_and_psycopg_names_are_taken(self):
        storage = self.storage(with_query(URI, application_name="opts", connect_timeout=10),
                               sslmode="disable", autocommit=True)
        with storage.pool.connection() as conn:
            self.assertEqual(conn.execute("SELECT current_setting('application_name')").fetchone()[0],
                             "opts")
        self.storage(with_query(URI, ssl="true"))  # libpq's URIs take ssl=true too (sslmode=require)

    def test_anchor(self):
        self.assertEqual(self.storage().anchor, "first")
        for value, anchor in (("first", "first"), ("epoch", "epoch")):
            with self.subTest(uri=value):
                self.assertEqual(self.storage(with_query(URI, anchor=value)).anchor, anchor)
            with self.subTest(option=value):
                self.assertEqual(self.storage(anchor=value).anchor, anchor)
        # spelled as pklimit's SQL spells them, as the Node store takes them
        for value in ("start", "", None, 1, "EPOCH", "First"):
            with self.subTest(bad=value), self.assertRaisesRegex(ConfigurationError, "anchor must be"):
                storage_from_string(URI, anchor=value)

    def test_schema_in_the_uri(self):
        (schema,), = sql("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n"
                         " ON n.oid = e.extnamespace WHERE e.extname = 'pklimit'")
        storage = self.storage(with_query(URI, schema=schema))
        self.assertEqual(storage.schema, schema)
        key = unique("schema")
        self.assertEqual(storage.incr(key, DAY), 1)
        self.assertEqual(storage.get(key), 1)


if __name__ == "__main__":
    unittest.main()


class OptionValues(unittest.TestCase):
    """Options whose values would break every call later are refused when
    the storage is made: rows of another shape, transactions left open, a
    pool that cannot hold a connection."""

    def test_row_shapes_are_refused(self):
        for name in ("row_factory", "cursor_factory", "context"):
            with self.subTest(option=name), \
                    self.assertRaisesRegex(ConfigurationError, f"'{name}'.*neither the storage's nor"):
                storage_from_string(URI, **{name: object()})

    def test_autocommit_stays_on(self):
        with self.assertRaisesRegex(ConfigurationError, "autocommit"):
            storage_from_string(URI, autocommit=False)

    def test_pool_sizes_are_checked(self):
        for sizes in ({"pool_max_size": 0}, {"pool_min_size": 5, "pool_max_size": 2}, {"pool_min_size": -1}):
            with self.subTest(**sizes), self.assertRaisesRegex(ConfigurationError, "pool_min_size <= pool_max_size"):
                storage_from_string(URI, **sizes)
