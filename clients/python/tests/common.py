"""What the test suites share: the databases under test (from the
environment the TAP test sets), SQL helpers and waiting for window room."""

import os
import time
import uuid

import psycopg

# The pklimit node, directly and through pgbouncer (transaction pooling, one
# server connection), and a node where no worker can start.
URI = os.environ["PKLIMIT_TEST_URI"]
POOLER_URI = os.environ["PKLIMIT_TEST_POOLER_URI"]
UNAVAILABLE_URI = os.environ["PKLIMIT_TEST_UNAVAILABLE_URI"]


def libpq(uri):
    """The plain libpq URI of a storage URI without pool options."""
    return "postgresql://" + uri.split("://", 1)[1]


def with_query(uri, **params):
    """uri with more query parameters (values already URL-encoded)."""
    extra = "&".join(f"{k}={v}" for k, v in params.items())
    return uri + ("&" if "?" in uri else "?") + extra


def sql(query, params=(), uri=URI):
    with psycopg.connect(libpq(uri), autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def rows(pattern, uri=URI):
    """(stored key, count) of the keys that contain pattern, sorted."""
    return sql("SELECT key, count FROM platformkit_limits WHERE strpos(key, %s) > 0"
               " ORDER BY key COLLATE \"C\"", (pattern,), uri)


def in_database(uri, dbname):
    """uri naming database dbname instead of its own."""
    scheme, rest = uri.split("://", 1)
    netloc, _, path = rest.partition("/")
    _, mark, query = path.partition("?")
    return f"{scheme}://{netloc}/{dbname}{mark}{query}"


def database(dbname, *setup):
    """The storage URI of database dbname of the cluster under test,
    created with the statements setup run in it if it does not exist."""
    uri = in_database(URI, dbname)
    if not sql("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)):
        sql(f'CREATE DATABASE "{dbname}"')
        try:
            for statement in setup:
                sql(statement, uri=uri)
        except Exception:
            sql(f'DROP DATABASE "{dbname}"')
            raise
    return uri


def clock():
    """The database's clock, in seconds since the epoch."""
    return sql("SELECT extract(epoch FROM clock_timestamp())::float8")[0][0]


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def window_end(seconds):
    """The end of the epoch-aligned window of `seconds` open now, by the
    database's clock."""
    return sql("SELECT extract(epoch FROM date_bin(make_interval(secs => %s), clock_timestamp(),"
               " timestamptz 'epoch'))::float8 + %s", (seconds, seconds))[0][0]


def wait_for_room(seconds, need=90):
    """Returns once the epoch-aligned window of `seconds` has at least
    `need` seconds left, so that no boundary resets a count mid-test."""
    deadline = time.monotonic() + need + 30
    while True:
        left = window_end(seconds) - sql("SELECT extract(epoch FROM clock_timestamp())::float8")[0][0]
        if left >= need:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the {seconds}s window did not turn over")
        time.sleep(min(0.5, max(left, 0.05)))


def memory_stats(uri=URI):
    """(memory_calls, memory_reads) of the database in pklimit_stats, 0
    before its first call."""
    found = sql("SELECT coalesce(memory_calls, 0), coalesce(memory_reads, 0) FROM pklimit_stats"
                " WHERE datname = current_database()", uri=uri)
    return found[0] if found else (0, 0)


def until(condition, what, seconds=30):
    """Polls until condition() is true; a test waits for a condition, not a time."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def flushed(uri=URI):
    """Returns once a flush of the memory path that started after this call
    has committed: everything changed in memory before it is in the table.
    The database's flushed_through (now - flush_lag_ms) is when the last
    complete flush started; read a little after it, hence the margin."""
    (now,), = sql("SELECT clock_timestamp()::text", uri=uri)
    until(lambda: sql("SELECT clock_timestamp() - flush_lag_ms * interval '1 millisecond'"
                      " > %s::timestamptz + interval '50 milliseconds' FROM pklimit_stats"
                      " WHERE datname = current_database()", (now,), uri) == [(True,)],
          "a flush")
