"""A storage of the ``limits`` library that counts with pklimit.

Importing this module registers :class:`PklimitStorage` for the schemes
``pklimit+postgresql://``, ``pklimit+postgres://`` and ``pklimit://``, so
that ``Limiter(get_remote_address, app=app,
storage_uri="pklimit+postgresql://user@host/db")`` counts in the database.

Every method is one SQL statement in autocommit on a connection of a
``psycopg_pool.ConnectionPool``; the tenant, if any, is set for that
statement only.  With the option ``durable`` false, hits take pklimit's
memory path (decided in shared memory, written to the table within
``pklimit.flush_interval``).  Only the fixed window is offered: see
README.md.
"""

import contextlib
import contextvars
import logging
import os
import sys
import threading
import time
import urllib.parse
from typing import Any, Callable, Iterator, Optional, Union

from psycopg import sql
from psycopg_pool import ConnectionPool

from limits.errors import ConfigurationError
from limits.storage import Storage

__all__ = ["PklimitStorage", "tenant", "set_tenant", "using_tenant"]

logger = logging.getLogger("pklimit")

# The storage is not told the limit (limits compares the count it returns);
# the largest bigint refuses nothing, so the count is the same.
NO_LIMIT = 9223372036854775807

# incr's answer when the store is unavailable and pklimit.on_unavailable is
# 'deny': a count above every limit.
DENIED_COUNT = sys.maxsize

# The tenant of the calls made in the current context, when the storage was
# given no "tenant" option.  '' (the default) is no tenant.
tenant: "contextvars.ContextVar[str]" = contextvars.ContextVar("pklimit_tenant", default="")

# Options of the URI's query string and of storage_options that configure
# the pool instead of going to libpq, with their converters.
POOL_OPTIONS = {
    "pool_min_size": int,
    "pool_max_size": int,
    "pool_timeout": float,
    "pool_max_idle": float,
    "pool_max_lifetime": float,
}

# Options of the URI's query string and of storage_options that are the
# storage's own, not libpq's: the pool's and durable.
STORAGE_OPTIONS = (*POOL_OPTIONS, "durable")

# The spellings of the "durable" option given as a string (as in the URI),
# in any case; any other value is refused.
BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}

SCHEME_PREFIXES = ("pklimit+postgresql://", "pklimit+postgres://", "pklimit://")


def set_tenant(value: Optional[str]) -> contextvars.Token:
    """Sets the tenant of this context's calls ('' or None: no tenant);
    returns the token that :data:`tenant`'s ``reset`` takes."""
    return tenant.set(value or "")


@contextlib.contextmanager
def using_tenant(value: Optional[str]) -> Iterator[None]:
    """The calls made inside the block count in tenant ``value``."""
    token = set_tenant(value)
    try:
        yield
    finally:
        tenant.reset(token)


def _durable(value: Any) -> bool:
    """The ``durable`` option: a bool, or a string of :data:`BOOLEANS`."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in BOOLEANS:
        return BOOLEANS[value.lower()]
    raise ConfigurationError(
        "the pklimit storage option durable must be true or false (or 1/0, yes/no), got %r"
        % (value,))


def _libpq_uri(uri: str) -> "tuple[str, dict]":
    """The libpq URI of a storage URI, and the storage's own options taken
    out of its query string (libpq refuses parameters it does not know)."""
    for prefix in SCHEME_PREFIXES:
        if uri.startswith(prefix):
            rest = uri[len(prefix):]
            break
    else:
        raise ConfigurationError(
            "pklimit storage URI must start with one of %s: %r"
            % (", ".join(SCHEME_PREFIXES), uri))
    netloc_path, _, query = rest.partition("?")
    kept, own = [], {}
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if name in STORAGE_OPTIONS:
            own[name] = value
        else:
            kept.append((name, value))
    libpq = "postgresql://" + netloc_path
    if kept:
        libpq += "?" + urllib.parse.urlencode(kept, quote_via=urllib.parse.quote)
    return libpq, own


class PklimitStorage(Storage):
    """Fixed-window counts in PostgreSQL with the pklimit extension.

    :param uri: ``pklimit+postgresql://user:password@host:port/dbname?...``;
     every query parameter but ``durable`` and the ``pool_*`` ones goes to
     libpq.
    :param options: ``durable`` (default true: each hit is committed before
     its answer; false: pklimit's memory path, decided in shared memory and
     written to the table within ``pklimit.flush_interval``, so that a
     crash may lose the last 2 x ``pklimit.flush_interval`` of hits; a
     bool, or true/false, 1/0, yes/no in any case), ``tenant`` (a string,
     or a callable returning the tenant of the current call, '' or None
     for none), ``schema`` (the schema of the pklimit functions; default:
     the search path), ``pool`` (a ``ConnectionPool`` of your own to use
     instead of one of the storage's), ``pool_min_size`` (default 1),
     ``pool_max_size`` (default 10), ``pool_timeout`` (seconds to wait for
     a connection, default 5), ``pool_max_idle``, ``pool_max_lifetime``;
     any other option is a keyword of ``psycopg.connect``.
    """

    STORAGE_SCHEME = ["pklimit+postgresql", "pklimit+postgres", "pklimit"]

    def __init__(self, uri: str, **options: Any) -> None:
        super().__init__(uri, **options)
        self.conninfo, own = _libpq_uri(uri)
        own.update({k: options.pop(k) for k in list(options) if k in STORAGE_OPTIONS})
        self.pool_options = {k: POOL_OPTIONS[k](v) for k, v in own.items() if k in POOL_OPTIONS}
        # durable => of every pklimit_check (incr and the peek); pklimit_count
        # and pklimit_forget are exact on both paths
        self.durable = _durable(own.get("durable", True))
        self.tenant_option: Union[None, str, Callable[[], Optional[str]]] = options.pop("tenant", None)
        schema = options.pop("schema", None)
        self.given_pool: Optional[ConnectionPool] = options.pop("pool", None)
        # No named prepared statements (they break pgbouncer's transaction
        # pooling) and autocommit: each statement is its own transaction.
        self.connect_kwargs = {"autocommit": True, "prepare_threshold": None, **options}
        self._pool: Optional[ConnectionPool] = None
        self._pool_pid = 0
        self._pool_lock = threading.Lock()
        self._statements = self._build_statements(schema, self.durable)

    @staticmethod
    def _build_statements(schema: Optional[str], durable: bool) -> dict:
        def fn(name: str) -> sql.Composable:
            return sql.SQL(".").join([sql.Identifier(schema), sql.Identifier(name)]) if schema \
                else sql.Identifier(name)

        # The tenant is set in a subquery the call reads its key from, so
        # that it is set before the call, and for this statement's
        # transaction only: no tenant reaches the next user of the
        # connection.  OFFSET 0 keeps the subquery from being flattened.
        scoped = sql.SQL(
            "(SELECT pg_catalog.set_config('platformkit.tenant', %s::text, true) AS tenant,"
            " %s::text AS key OFFSET 0) t")
        # only when false: the default statements are those any pklimit
        # 0.3.0 takes
        durable_arg = sql.SQL("") if durable else sql.SQL(", durable => false")
        return {
            "incr": sql.SQL(
                "SELECT c.allowed, c.count, c.status FROM {scoped},"
                " LATERAL {check}(t.key, {no_limit}, %s::bigint * interval '1 second',"
                " cost => %s::bigint{durable}) c").format(
                    scoped=scoped, check=fn("pklimit_check"), no_limit=sql.Literal(NO_LIMIT),
                    durable=durable_arg),
            "peek": sql.SQL(
                "SELECT c.count, extract(epoch FROM c.reset_at)::float8, c.status FROM {scoped},"
                " LATERAL {check}(t.key, {no_limit}, interval '1 second', cost => 0{durable})"
                " c").format(
                    scoped=scoped, check=fn("pklimit_check"), no_limit=sql.Literal(NO_LIMIT),
                    durable=durable_arg),
            "get": sql.SQL(
                "SELECT {count}(t.key), pg_catalog.current_setting('pklimit.on_unavailable')"
                " FROM {scoped}").format(scoped=scoped, count=fn("pklimit_count")),
            "clear": sql.SQL(
                "SELECT {forget}(t.key) FROM {scoped}").format(
                    scoped=scoped, forget=fn("pklimit_forget")),
        }

    @property
    def pool(self) -> ConnectionPool:
        """The storage's pool, opened on first use, and again in a forked
        child (a pool's connections and threads do not survive a fork)."""
        if self.given_pool is not None:
            return self.given_pool
        pid = os.getpid()
        if self._pool is None or self._pool_pid != pid:
            with self._pool_lock:
                if self._pool is None or self._pool_pid != pid:
                    self._pool = ConnectionPool(
                        self.conninfo,
                        kwargs=self.connect_kwargs,
                        min_size=self.pool_options.get("pool_min_size", 1),
                        max_size=self.pool_options.get("pool_max_size", 10),
                        timeout=self.pool_options.get("pool_timeout", 5.0),
                        max_idle=self.pool_options.get("pool_max_idle", 600.0),
                        max_lifetime=self.pool_options.get("pool_max_lifetime", 3600.0),
                        name="pklimit-limits",
                        open=True,
                    )
                    self._pool_pid = pid
        return self._pool

    def close(self) -> None:
        """Closes the storage's own pool (a given pool is left open)."""
        with self._pool_lock:
            if self._pool is not None and self._pool_pid == os.getpid():
                self._pool.close()
            self._pool = None

    def current_tenant(self) -> str:
        """The tenant of this call: the ``tenant`` option, else the
        :data:`tenant` context variable; '' for none."""
        option = self.tenant_option
        if option is None:
            return tenant.get()
        value = option() if callable(option) else option
        return value or ""

    def _one(self, statement: str, *params: Any) -> tuple:
        with self.pool.connection() as conn:
            return conn.execute(self._statements[statement],
                                (self.current_tenant(), *params)).fetchone()

    def incr(self, key: str, expiry: int, elastic_expiry: bool = False, amount: int = 1) -> int:
        """Records ``amount`` events for ``key`` in its window of ``expiry``
        seconds (aligned to the Unix epoch) and returns the window's count.
        When the store is unavailable: ``sys.maxsize`` under
        ``pklimit.on_unavailable = 'deny'``, 0 under ``'allow'``."""
        if elastic_expiry:
            raise ConfigurationError(
                "the pklimit storage does not support elastic expiry: pklimit never "
                "extends a window; use the 'fixed-window' strategy")
        allowed, count, status = self._one("incr", key, int(expiry), int(amount))
        if count is not None:
            return int(count)
        logger.warning("pklimit store unavailable (%s) for key %r: counted as %s",
                       status, key, "allowed" if allowed else "refused")
        return 0 if allowed else DENIED_COUNT

    def get(self, key: str) -> int:
        """The count of the key's open window, 0 if none.  When the store is
        unavailable, as incr: 0 under 'allow', ``sys.maxsize`` under 'deny'."""
        count, on_unavailable = self._one("get", key)
        if count is not None:
            return int(count)
        logger.warning("pklimit store unavailable for key %r: count read as %s",
                       key, "refused" if on_unavailable == "deny" else "allowed")
        return DENIED_COUNT if on_unavailable == "deny" else 0

    def get_expiry(self, key: str) -> float:
        """When the key's open window ends, as seconds since the epoch; now if
        the key has no open window, as limits' own storages answer, and also
        when the store is unavailable."""
        count, reset_at, status = self._one("peek", key)
        if count is None:
            logger.warning("pklimit store unavailable (%s) for key %r: no reset time", status, key)
        if not count:
            return time.time()
        return float(reset_at)

    def check(self) -> bool:
        """True if the pklimit store answers: a peek that records nothing."""
        try:
            status = self._one("peek", "pklimit-health-check")[2]
            return status == "ok"
        except Exception:  # health checks answer, they do not raise
            logger.debug("pklimit health check failed", exc_info=True)
            return False

    def reset(self) -> Optional[int]:
        """pklimit cannot list or delete every key: raises
        ``NotImplementedError``, as limits' memcached storage does (flask-limiter's
        ``Limiter.reset`` logs that the storage cannot be reset)."""
        raise NotImplementedError("pklimit cannot delete every key; clear keys one by one")

    def clear(self, key: str) -> None:
        """Deletes the key's count (``pklimit_forget``)."""
        (forgotten,) = self._one("clear", key)
        if forgotten is None:
            logger.warning("pklimit store unavailable for key %r: count not cleared", key)
