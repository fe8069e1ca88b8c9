"""A storage of the ``limits`` library that counts with pklimit.

Importing this module registers :class:`PklimitStorage` for the schemes
``pklimit+postgresql://``, ``pklimit+postgres://`` and ``pklimit://``, so
that ``Limiter(get_remote_address, app=app,
storage_uri="pklimit+postgresql://user@host/db")`` counts in the database.

Every method is one SQL statement in autocommit on a connection of a
``psycopg_pool.ConnectionPool``; the tenant, if any, is set for that
statement only.  With the option ``durable`` false, hits take pklimit's
memory path (decided in shared memory, written to the table within
``pklimit.flush_interval``).  With the option ``policy``, a limit named in
the database (pklimit 0.4.0's policies) decides each hit.  The fixed
window is offered on every version of ``limits``, the sliding window
counter where ``limits`` has it (4.1 and later); the moving window is not:
see README.md.

The storage keeps no state of its own per key: every answer is pklimit's,
read from the database at the call, so no key an attacker chooses grows
anything in the application.
"""

import contextlib
import contextvars
import logging
import os
import re
import sys
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Type, Union

import psycopg
from psycopg import pq, sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import ConnectionPool

from limits import errors as limits_errors
from limits.errors import ConfigurationError
from limits.storage import Storage

from .keys import escape_key as _escape_key

try:  # limits 4.1 and later
    from limits.storage.base import SlidingWindowCounterSupport, TimestampedSlidingWindow

    # pklimit's sliding windows are aligned to the Unix epoch, as the
    # windows of limits' timestamp-keyed storages are.
    SLIDING_BASES: Tuple[type, ...] = (SlidingWindowCounterSupport, TimestampedSlidingWindow)
except ImportError:
    SLIDING_BASES = ()

__all__ = ["PklimitStorage", "PklimitSetupError", "tenant", "set_tenant", "using_tenant"]

logger = logging.getLogger("pklimit")

# The storage is not told the limit of a fixed window (limits compares the
# count it returns); the largest bigint refuses nothing, so the count is
# the same.
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

# The storage's own options that the URI's query string may give too.
URI_OPTIONS = (*POOL_OPTIONS, "durable", "anchor", "schema", "policy")

# What a policy decides for itself: a storage that names one takes none.
POLICY_DECIDES = ("durable", "anchor")

# The longest policy name pklimit takes, in bytes.
POLICY_NAME_MAX = 63

# The storage's own options given only in storage_options; wrap_exceptions
# is limits' (3.8 and later).
OBJECT_OPTIONS = ("tenant", "pool", "wrap_exceptions")

# Keywords of psycopg.connect that are not libpq's and that the storage
# takes (row_factory, cursor_factory and context would change the rows it
# reads: refused as unknown).  autocommit must stay true.
CONNECT_KEYWORDS = ("autocommit", "prepare_threshold")

# The spellings of the "durable" option given as a string (as in the URI),
# in any case; any other value is refused.
BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}

# Where a fixed window starts: at the event that finds no open window, as
# limits' own storages start it (needs pklimit 0.4.0), or at a multiple of
# its length since the Unix epoch, pklimit's default.
ANCHORS = ("first", "epoch")

SCHEME_PREFIXES = ("pklimit+postgresql://", "pklimit+postgres://", "pklimit://")

# Before 4.0, limits declares get_expiry an int; from 4.0 on, a float.
EXPIRY_TYPE: Type = float if "float" in str(Storage.get_expiry.__annotations__.get("return")) else int


class PklimitSetupError(ConfigurationError):
    """pklimit's functions cannot be called as the storage calls them in
    its database: the message says what to run there.  Its ``__cause__`` is
    the server's error (SQLSTATE 42883)."""


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


def _anchor(value: Any) -> str:
    """The ``anchor`` option: 'first' or 'epoch', exactly, as pklimit spells
    them."""
    if isinstance(value, str) and value in ANCHORS:
        return value
    raise ConfigurationError(
        "the pklimit storage option anchor must be 'first' or 'epoch', got %r" % (value,))


def _policy(own: Dict[str, Any]) -> Optional[str]:
    """The ``policy`` option: a name pklimit can hold, given without the
    options the policy decides; None for none."""
    value = own.get("policy")
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value.encode("utf-8", "surrogatepass")) <= POLICY_NAME_MAX:
        raise ConfigurationError(
            "the pklimit storage option policy must be the name of a pklimit policy, 1 to %d bytes,"
            " got %r" % (POLICY_NAME_MAX, value))
    for name in POLICY_DECIDES:
        if name in own:
            raise ConfigurationError(
                "the pklimit storage option %s cannot be given with policy: the policy %r decides it;"
                " leave %s out, or set it in the policy (pklimit_policy_set(%r, ..., %s => ...))"
                % (name, value, name, value, name))
    return value


def _pool_option(name: str, value: Any) -> Union[int, float]:
    try:
        return POOL_OPTIONS[name](value)
    except (TypeError, ValueError):
        raise ConfigurationError(
            "the pklimit storage option %s must be a number, got %r" % (name, value)) from None


def _refuse_unknown(names: Iterator[str], known: Tuple[str, ...], where: str) -> None:
    """Refuses a name that neither the storage nor libpq knows, at once:
    libpq would refuse it at every connection, and the pool would only
    time out.  Names are case-sensitive, as libpq's are."""
    for name in names:
        if name in known:
            continue
        near = [k for k in (*URI_OPTIONS, *OBJECT_OPTIONS, *known) if k.lower() == name.lower()]
        raise ConfigurationError(
            "the pklimit storage does not know the %s %r%s" % (
                where, name,
                " (names are case-sensitive: did you mean %r?)" % near[0] if near else
                ": it is neither the storage's nor a libpq connection parameter"))


def _libpq_keywords() -> Tuple[str, ...]:
    return tuple(o.keyword.decode() for o in pq.Conninfo.get_defaults())


def _split_uri(uri: str) -> "tuple[str, dict]":
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
        if name in URI_OPTIONS:
            own[name] = value
        else:
            kept.append((name, value))
    # libpq's URIs also take ssl=true (sslmode=require)
    _refuse_unknown((name for name, _ in kept), (*_libpq_keywords(), "ssl"), "URI parameter")
    libpq = "postgresql://" + netloc_path
    if kept:
        libpq += "?" + urllib.parse.urlencode(kept, quote_via=urllib.parse.quote)
    return libpq, own


def _version(text: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


class PklimitStorage(Storage, *SLIDING_BASES):  # type: ignore[misc]
    """Rate limit counts in PostgreSQL with the pklimit extension: the
    fixed window, and the sliding window counter where ``limits`` has it.

    :param uri: ``pklimit+postgresql://user:password@host:port/dbname?...``;
     every query parameter but the storage's options (``durable``,
     ``anchor``, ``schema``, ``policy`` and the ``pool_*`` ones) goes to
     libpq.
    :param options: ``durable`` (default true: each hit is committed before
     its answer; false: pklimit's memory path, decided in shared memory and
     written to the table within ``pklimit.flush_interval``, so that a
     crash may lose the last 2 x ``pklimit.flush_interval`` of hits; a
     bool, or true/false, 1/0, yes/no in any case), ``anchor`` (where a
     fixed window starts: 'first', the default, at the key's first hit
     with no window open, as limits' own storages do; 'epoch', at a
     multiple of its length since the Unix epoch), ``policy`` (the name of
     a pklimit policy, pklimit 0.4.0: the policy row decides every hit, its
     limit, window, algorithm, durability and anchor, so ``durable`` and
     ``anchor`` are refused with it), ``tenant`` (a string,
     or a callable returning the tenant of the current call, '' or None
     for none), ``schema`` (the schema of the pklimit functions; default:
     the search path), ``pool`` (a ``ConnectionPool`` of your own to use
     instead of one of the storage's), ``pool_min_size`` (default 1),
     ``pool_max_size`` (default 10), ``pool_timeout`` (seconds to wait for
     a connection, default 5), ``pool_max_idle``, ``pool_max_lifetime``,
     ``wrap_exceptions`` (limits 3.8 and later); any other option is a
     keyword of ``psycopg.connect``.  A name neither knows raises
     ``ConfigurationError``.
    """

    STORAGE_SCHEME = ["pklimit+postgresql", "pklimit+postgres", "pklimit"]

    def __init__(self, uri: str, **options: Any) -> None:
        self.conninfo, own = _split_uri(uri)
        _refuse_unknown(
            (k for k in options if k not in URI_OPTIONS),
            (*OBJECT_OPTIONS, *CONNECT_KEYWORDS, *_libpq_keywords()), "option")
        own.update({k: options.pop(k) for k in list(options) if k in URI_OPTIONS})
        wrap = options.pop("wrap_exceptions", False)
        if hasattr(limits_errors, "StorageError"):
            super().__init__(uri, wrap_exceptions=wrap)
        elif wrap:
            raise ConfigurationError("wrap_exceptions needs limits 3.8 or later")
        else:
            super().__init__(uri)
        self.pool_options = {k: _pool_option(k, v) for k, v in own.items() if k in POOL_OPTIONS}
        self.policy: Optional[str] = _policy(own)
        # durable => of every pklimit_check; pklimit_count and
        # pklimit_forget are exact on both paths
        self.durable = _durable(own.get("durable", True))
        self.anchor = _anchor(own.get("anchor", "first"))
        self.schema: Optional[str] = own.get("schema") or None
        self.tenant_option: Union[None, str, Callable[[], Optional[str]]] = options.pop("tenant", None)
        self.given_pool: Optional[ConnectionPool] = options.pop("pool", None)
        # No named prepared statements (they break pgbouncer's transaction
        # pooling) and autocommit: each statement is its own transaction.
        if options.get("autocommit", True) is not True:
            raise ConfigurationError(
                "the pklimit storage runs each statement in autocommit: leave autocommit out")
        self.connect_kwargs = {"autocommit": True, "prepare_threshold": None, **options}
        min_size = self.pool_options.get("pool_min_size", 1)
        max_size = self.pool_options.get("pool_max_size", 10)
        if not 0 <= min_size <= max_size or max_size < 1:
            raise ConfigurationError(
                "the pklimit storage's pool needs 0 <= pool_min_size <= pool_max_size and"
                " pool_max_size >= 1, got %s and %s" % (min_size, max_size))
        try:
            make_conninfo(self.conninfo, **{k: v for k, v in options.items()
                                            if k not in CONNECT_KEYWORDS})
        except psycopg.ProgrammingError as error:
            raise ConfigurationError("the pklimit storage's connection: %s" % error) from None
        self._pool: Optional[ConnectionPool] = None
        self._pool_pid = 0
        self._pool_lock = threading.Lock()
        if self.policy is None:
            self._statements = self._build_statements(self.schema, self.durable, self.anchor)
            self._needs = self._needed_versions(self.durable, self.anchor)
        else:
            self._statements = self._build_policy_statements(self.schema)
            self._needs = {name: ("0.4.0", "the option policy") for name in self._statements}

    @property
    def base_exceptions(self) -> Union[Type[Exception], Tuple[Type[Exception], ...]]:
        """What limits 3.8 and later wrap in ``StorageError`` with
        ``wrap_exceptions``: the server's errors and the pool's timeout."""
        return psycopg.Error

    @staticmethod
    def _build_statements(schema: Optional[str], durable: bool, anchor: str) -> Dict[str, sql.Composable]:
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
        # Arguments sent only when they are not the server's defaults, so
        # that the statements are those the oldest pklimit that has the
        # feature takes.
        durable_arg = sql.SQL("") if durable else sql.SQL(", durable => false")
        fixed = durable_arg + (sql.SQL(", anchor => 'first'") if anchor == "first" else sql.SQL(""))
        sliding = sql.SQL(", algorithm => 'sliding'") + durable_arg
        names = dict(check=fn("pklimit_check"), count=fn("pklimit_count"),
                     forget=fn("pklimit_forget"), no_limit=sql.Literal(NO_LIMIT), scoped=scoped,
                     fixed=fixed, sliding=sliding)
        return {name: sql.SQL(text).format(**names) for name, text in {
            "incr": "SELECT c.allowed, c.count, c.status FROM {scoped},"
                    " LATERAL {check}(t.key, {no_limit}, %s::bigint * interval '1 second',"
                    " cost => %s::bigint{fixed}) c",
            "peek": "SELECT c.count, extract(epoch FROM c.reset_at)::float8, c.status FROM {scoped},"
                    " LATERAL {check}(t.key, {no_limit}, interval '1 second', cost => 0{fixed}) c",
            "get": "SELECT {count}(t.key), pg_catalog.current_setting('pklimit.on_unavailable')"
                   " FROM {scoped}",
            "clear": "SELECT {forget}(t.key) FROM {scoped}",
            # refused hits record nothing, as limits' own storages refuse them
            "acquire_sliding": "SELECT c.allowed, c.count, c.status FROM {scoped},"
                               " LATERAL {check}(t.key, %s::bigint, %s::bigint * interval '1 second',"
                               " cost => %s::bigint, record_refused => false{sliding}) c",
            # The estimate, and when the next event is freed: a second peek,
            # with the estimate as the limit, answers that as its retry_after.
            "sliding_window": "SELECT c.allowed, c.count, c.status,"
                              " extract(epoch FROM pg_catalog.clock_timestamp())::float8, r.retry"
                              " FROM {scoped}, LATERAL {check}(t.key, {no_limit},"
                              " %s::bigint * interval '1 second', cost => 0{sliding}) c,"
                              " LATERAL (SELECT CASE WHEN c.count > 0 THEN"
                              " (SELECT extract(epoch FROM n.retry_after)::float8 FROM {check}(t.key,"
                              " c.count, %s::bigint * interval '1 second', cost => 0{sliding}) n)"
                              " END AS retry) r",
        }.items()}

    @staticmethod
    def _build_policy_statements(schema: Optional[str]) -> Dict[str, sql.Composable]:
        """The statements of a storage with the option policy: the policy
        forms, the policy's name passed with the tenant and the key.  incr
        also reads the max_count of the policy row that decided the call
        (the tenant's override, else the default row; pklimit_policies shows
        a session no other tenant's)."""
        def fn(name: str) -> sql.Composable:
            return sql.SQL(".").join([sql.Identifier(schema), sql.Identifier(name)]) if schema \
                else sql.Identifier(name)

        names = dict(check=fn("pklimit_check"), count=fn("pklimit_count"), forget=fn("pklimit_forget"),
                     policies=fn("pklimit_policies"), scoped=sql.SQL(
                         "(SELECT pg_catalog.set_config('platformkit.tenant', %s::text, true) AS tenant,"
                         " %s::text AS key, %s::text AS policy OFFSET 0) t"))
        return {name: sql.SQL(text).format(**names) for name, text in {
            # cost NULL: the policy's own
            "incr": "SELECT c.allowed, c.count, c.status, p.max_count FROM {scoped}"
                    " CROSS JOIN LATERAL {check}(t.key, t.policy, %s::bigint) c"
                    " LEFT JOIN LATERAL (SELECT p.max_count FROM {policies} p WHERE p.name = t.policy"
                    " AND (p.tenant IS NULL OR p.tenant = NULLIF(t.tenant, ''))"
                    " ORDER BY p.tenant IS NULL LIMIT 1) p ON true",
            "peek": "SELECT c.count, extract(epoch FROM c.reset_at)::float8, c.status FROM {scoped},"
                    " LATERAL {check}(t.key, t.policy, 0::bigint) c",
            "get": "SELECT {count}(t.key, t.policy), pg_catalog.current_setting('pklimit.on_unavailable')"
                   " FROM {scoped}",
            "clear": "SELECT {forget}(t.key, t.policy) FROM {scoped}",
        }.items()}

    @staticmethod
    def _needed_versions(durable: bool, anchor: str) -> Dict[str, Tuple[str, str]]:
        """The oldest pklimit each statement runs on, and the feature that
        needs it, for the message of a call that finds its function missing."""
        fixed = ("0.4.0", "the option anchor 'first'") if anchor == "first" else \
            ("0.3.0", "the option durable false") if not durable else ("0.2.0", "the storage")
        sliding = ("0.3.0", "the sliding window counter")
        return {"incr": fixed, "peek": fixed, "get": ("0.1.0", ""), "clear": ("0.1.0", ""),
                "acquire_sliding": sliding, "sliding_window": sliding}

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
            try:
                key, *rest = params
                policy = () if self.policy is None else (self.policy,)
                return conn.execute(self._statements[statement],
                                    (self.current_tenant(), _escape_key(key), *policy, *rest)).fetchone()
            except (psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName,
                    psycopg.errors.UndefinedTable) as error:
                # 42883: a pklimit function, as the statement calls it, is
                # not there; 3F000: the option schema's schema is not; 42P01:
                # nor is pklimit_policies
                setup = self._diagnose(conn, statement)
                if setup is None:
                    raise
                raise PklimitSetupError(setup) from error

    def _diagnose(self, conn: psycopg.Connection, statement: str) -> Optional[str]:
        """Why pklimit's function was not found in the connection's
        database, and what to run; None if the cause is something else."""
        try:
            database, version, schema, on_path = conn.execute(
                "SELECT pg_catalog.current_database(), e.extversion, n.nspname,"
                " n.nspname = ANY (pg_catalog.current_schemas(false))"
                " FROM (VALUES (1)) v"
                " LEFT JOIN pg_catalog.pg_extension e ON e.extname = 'pklimit'"
                " LEFT JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace").fetchone()
        except psycopg.Error:  # e.g. inside an application's aborted transaction
            return None
        if version is None:
            return ("pklimit is not installed in database %r: run CREATE EXTENSION pklimit in it"
                    " (pklimit must be in shared_preload_libraries), or point the storage at the"
                    " database that has it" % database)
        if self.schema not in (None, schema) or (self.schema is None and not on_path):
            return ("pklimit is installed in schema %r of database %r, %s: pass the storage"
                    " option schema=%r (or ?schema=%s in the URI)" % (
                        schema, database,
                        "not in %r that the option schema names" % self.schema if self.schema
                        else "which is not on the search path", schema, schema))
        needed, feature = self._needs[statement]
        if _version(version) < _version(needed):
            return ("pklimit %s in database %r is older than %s needs (%s): install pklimit %s or"
                    " later on the server and run ALTER EXTENSION pklimit UPDATE in that database%s"
                    % (version, database, feature, needed, needed,
                       ", or pass the storage option anchor='epoch'" if "anchor" in feature else ""))
        return None

    def _no_policy(self, method: str) -> None:
        """The sliding window counter passes its own limit: refused with a
        policy, whose algorithm (sliding too, if it says so) applies through
        the fixed window's methods."""
        if self.policy is not None:
            raise ConfigurationError(
                "the pklimit storage's %s cannot be used with the option policy: the policy %r"
                " decides the algorithm; use the strategy 'fixed-window' (flask-limiter's default),"
                " whatever the policy's algorithm" % (method, self.policy))

    @staticmethod
    def _unavailable(status: str, key: str, what: str) -> None:
        logger.warning("pklimit store unavailable (%s) for key %r: %s", status, key, what)

    def incr(self, key: str, expiry: int, elastic_expiry: bool = False, amount: int = 1) -> int:
        """Records ``amount`` events for ``key`` in its window of ``expiry``
        seconds and returns the window's count.  When the store is
        unavailable: ``sys.maxsize`` under ``pklimit.on_unavailable =
        'deny'``, 0 under ``'allow'``.  (``elastic_expiry`` is the argument
        of limits before 5.0.)

        With the option policy, the policy decides, whatever ``expiry`` and
        the limit ``limits`` compares with: ``amount`` 1 (limits' default)
        is the policy's cost, another replaces it; a refusal returns
        ``sys.maxsize``, above every limit, and a refusal that the policy's
        shadow mode let through at most the policy's ``max_count``."""
        if elastic_expiry:
            raise ConfigurationError(
                "the pklimit storage does not support elastic expiry: pklimit never "
                "extends a window; use the 'fixed-window' strategy")
        if self.policy is not None:
            return self._incr_policy(key, int(amount))
        allowed, count, status = self._one("incr", key, int(expiry), int(amount))
        if count is not None:
            return int(count)
        self._unavailable(status, key, "counted as %s" % ("allowed" if allowed else "refused"))
        return 0 if allowed else DENIED_COUNT

    def _incr_policy(self, key: str, amount: int) -> int:
        allowed, count, status, max_count = self._one("incr", key, None if amount == 1 else amount)
        if count is None:
            self._unavailable(status, key, "counted as %s" % ("allowed" if allowed else "refused"))
            return 0 if allowed else DENIED_COUNT
        if not allowed:
            return DENIED_COUNT
        return int(count) if max_count is None else min(int(count), int(max_count))

    def get(self, key: str) -> int:
        """The count of the key's open window, 0 if none.  When the store is
        unavailable, as incr: 0 under 'allow', ``sys.maxsize`` under 'deny'."""
        count, on_unavailable = self._one("get", key)
        if count is not None:
            return int(count)
        logger.warning("pklimit store unavailable for key %r: count read as %s",
                       key, "refused" if on_unavailable == "deny" else "allowed")
        return DENIED_COUNT if on_unavailable == "deny" else 0

    def get_expiry(self, key: str) -> Union[int, float]:
        """When the key's open window ends, in seconds since the epoch; now if
        the key has no open window, as limits' own storages answer, and also
        when the store is unavailable.  An int where limits declares one
        (before 4.0), else a float."""
        count, reset_at, status = self._one("peek", key)
        if count is None:
            logger.warning("pklimit store unavailable (%s) for key %r: no reset time", status, key)
        return EXPIRY_TYPE(reset_at if count else time.time())

    def check(self) -> bool:
        """True if the pklimit store answers: a peek that records nothing
        (with the option policy, under the policy: false if it does not
        exist)."""
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
        """Deletes the key's count, whatever its algorithm (``pklimit_forget``;
        with the option policy, its count under the policy)."""
        (forgotten,) = self._one("clear", key)
        if forgotten is None:
            logger.warning("pklimit store unavailable for key %r: count not cleared", key)

    # The sliding window counter (limits 4.1 and later): pklimit's
    # algorithm 'sliding', whose estimate is limits' own.

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """Records ``amount`` events if pklimit's estimate of the last
        ``expiry`` seconds, with them, is at most ``limit``; a refusal records
        nothing.  One call, decided by pklimit on the key's row: there is
        nothing to take back after a race.  When the store is unavailable,
        ``pklimit.on_unavailable``'s answer."""
        self._no_policy("acquire_sliding_window_entry")
        allowed, count, status = self._one("acquire_sliding", key, int(limit), int(expiry), int(amount))
        if count is None:
            self._unavailable(status, key, "answered %s" % ("allowed" if allowed else "refused"))
        return bool(allowed)

    def get_sliding_window(self, key: str, expiry: int) -> Tuple[int, float, int, float]:
        """pklimit's estimate, rounded up, as the current window's count,
        with nothing in the previous one, and as its time to live when the
        next event is freed (at most the end of the current window, as
        limits' own storages answer): limits' strategy then shows pklimit's
        own remaining count and reset time.  When the store is unavailable:
        nothing counted under 'allow', ``sys.maxsize`` under 'deny'."""
        self._no_policy("get_sliding_window")
        allowed, count, status, now, retry = self._one("sliding_window", key, int(expiry), int(expiry))
        if count is None:
            self._unavailable(status, key, "window read as %s" % ("empty" if allowed else "full"))
            return 0, 0.0, 0 if allowed else DENIED_COUNT, 0.0
        if not count:
            return 0, 0.0, 0, 0.0
        window_end = (now // expiry + 1) * expiry
        return 0, 0.0, int(count), max(0.0, min(retry, window_end - now))

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        """Deletes the key's count (one row per key, whatever its windows)."""
        self.clear(key)
