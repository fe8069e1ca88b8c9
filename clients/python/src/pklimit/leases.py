"""Concurrency limits with pklimit's leases (pklimit 0.4.0, docs/leases.md):
at most ``max_concurrent`` holders at once per key, shared by every process
that uses the database.

    with pklimit.lease(pool, f"export:{tenant}", 2, "15 minutes") as held:
        run_export(renew=held.renew)

    @pklimit.lease(pool, "nightly-report", 1, "1 hour")
    def nightly_report(): ...

Entering acquires a lease (``pklimit_acquire_check``) or raises
:class:`LeaseRefused`, with ``retry_after`` in seconds, when none is free;
leaving releases it, also when the block raises.  There is no queue of
waiters: a refused caller retries after ``retry_after``.  A lease nobody
releases (the process died) ends by itself after its length; a long job
calls :meth:`Lease.renew` as it goes, say every third of the lease.
"""

import datetime
import functools
import logging
import sys
from typing import Any, Callable, Optional, TypeVar, Union

import psycopg
from psycopg import sql

from .keys import escape_key

__all__ = ["lease", "Lease", "LeaseRefused"]

log = logging.getLogger("pklimit.lease")

F = TypeVar("F", bound=Callable[..., Any])
Length = Union[str, float, int, datetime.timedelta]


class LeaseRefused(Exception):
    """No lease was free: ``held`` of ``max_concurrent`` are live on the key,
    and the oldest ends in ``retry_after`` seconds (None: none will, as
    ``max_concurrent`` is 0).  ``status`` is "ok"; otherwise the store was
    unavailable and ``pklimit.on_unavailable = deny`` refused the lease
    (``held`` and ``retry_after`` are None)."""

    def __init__(self, key: str, held: Optional[int], max_concurrent: int,
                 retry_after: Optional[float], status: str = "ok"):
        self.key = key
        self.held = held
        self.max_concurrent = max_concurrent
        self.retry_after = retry_after
        self.status = status
        if status != "ok":
            message = f"no lease on {key!r}: the store was unavailable ({status}) and pklimit.on_unavailable is deny"
        else:
            wait = "" if retry_after is None else f"; retry after {retry_after:.3f} s"
            message = f"no lease free on {key!r}: {held} of {max_concurrent} held{wait}"
        super().__init__(message)


def _context_tenant() -> str:
    """The tenant pklimit.limits.using_tenant (or set_tenant) set for this
    context, '' for none (the session's then).  Read only where that module is loaded: if it is
    not, nothing can have set one."""
    limits_module = sys.modules.get(__package__ + ".limits")
    if limits_module is None:
        return ""
    value: str = limits_module.tenant.get()
    return value


def _length(value: Length) -> Any:
    """A lease length as pklimit takes it: an interval string, a timedelta,
    or seconds."""
    if isinstance(value, bool):
        raise TypeError(f"lease must be an interval string, a timedelta or seconds, got {value!r}")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ValueError(f"lease must be positive, got {value!r}")
        return datetime.timedelta(seconds=value)
    if isinstance(value, (str, datetime.timedelta)):
        return value
    raise TypeError(f"lease must be an interval string, a timedelta or seconds, got {value!r}")


class Lease:
    """One lease on a key, taken on entering and released on leaving; made
    by :func:`lease`.  Used as a decorator, each call of the function takes
    a lease of its own.

    ``conn`` is a psycopg connection (statements run in a transaction of
    their own, or a savepoint of the one open) or a psycopg_pool pool.
    Once entered: ``token``, ``held`` (live leases on the key after the
    acquire), ``max_concurrent`` and ``status`` ("ok"; "shadow" or the
    reason the store was unavailable when the token is no lease)."""

    def __init__(self, conn: Any, key: str, max_concurrent: Optional[int] = None,
                 lease: Optional[Length] = None, *, policy: Optional[str] = None,
                 schema: Optional[str] = None, tenant: Optional[str] = None):
        if policy is None:
            if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) \
                    or not 0 <= max_concurrent <= 1000:
                raise ValueError(f"max_concurrent must be an integer from 0 to 1000, got {max_concurrent!r}")
            if lease is None:
                raise TypeError("lease is needed without a policy")
            self._lease = _length(lease)
        else:
            if max_concurrent is not None or lease is not None:
                raise TypeError(f"max_concurrent and lease cannot be given with policy: the policy {policy!r} decides them")
            self._lease = None
        if not isinstance(key, str) or key == "":
            raise ValueError(f"key must be a non-empty string, got {key!r}")
        self._conn = conn
        self.key = key
        self._stored = escape_key(key)
        self._max = max_concurrent
        self._policy = policy
        self._schema = schema
        self._tenant = tenant
        self._call_tenant: Optional[str] = None
        self.token: Optional[str] = None
        self.held: Optional[int] = None
        self.max_concurrent: Optional[int] = max_concurrent
        self.status: Optional[str] = None

    def _copy(self) -> "Lease":
        return Lease(self._conn, self.key, self._max, None if self._policy else self._lease,
                     policy=self._policy, schema=self._schema, tenant=self._tenant)

    def _function(self, name: str) -> sql.Composable:
        if self._schema is None:
            return sql.Identifier(name)
        return sql.Identifier(self._schema, name)

    def _run(self, query: sql.Composable, params: tuple) -> Any:
        """One statement in a transaction of its own (or a savepoint), the
        tenant set for it alone; its single row."""
        def run(conn: Any) -> Any:
            if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                # nothing runs in a failed transaction: the lease ends by
                # itself (use a pool or an autocommit connection)
                raise psycopg.errors.InFailedSqlTransaction(
                    f"the connection's transaction failed: the lease on {self.key!r} cannot be"
                    " released on it, and ends by itself; give pklimit.lease a pool or an"
                    " autocommit connection")
            with conn.transaction():
                if self._call_tenant is not None:
                    conn.execute("SELECT pg_catalog.set_config('platformkit.tenant', %s::text, true)",
                                 (self._call_tenant,))
                return conn.execute(query, params).fetchone()
        if hasattr(self._conn, "connection") and not hasattr(self._conn, "execute"):
            with self._conn.connection() as conn:
                return run(conn)
        return run(self._conn)

    def acquire(self) -> "Lease":
        """Take the lease, or raise :class:`LeaseRefused`."""
        if self.token is not None:
            # a second token in the same object would lose the first one's release
            raise RuntimeError(f"this lease on {self.key!r} is held already: make one pklimit.lease(...)"
                               " per holder (a decorated function takes one per call)")
        # the tenant is fixed at the acquire, for the release and renewals too
        self._call_tenant = self._tenant if self._tenant is not None else _context_tenant() or None
        if self._policy is None:
            call = sql.SQL("{}(%s::text, %s::bigint, %s::interval)").format(
                self._function("pklimit_acquire_check"))
            params: tuple = (self._stored, self._max, self._lease)
        else:
            call = sql.SQL("{}(%s::text, %s::text)").format(self._function("pklimit_acquire_check"))
            params = (self._stored, self._policy)
        row = self._run(sql.SQL(
            "SELECT a.token::text, a.held, a.max_concurrent,"
            " extract(epoch FROM a.retry_after)::float8, a.status FROM {} a").format(call), params)
        token, held, max_concurrent, retry_after, status = row
        self.held = held
        self.max_concurrent = max_concurrent
        self.status = status
        if status not in ("ok", "shadow"):
            log.warning("pklimit: store unavailable (%s) for the lease on %r: pklimit.on_unavailable answered %s",
                        status, self.key, "deny" if token is None else "allow")
        if token is None:
            raise LeaseRefused(self.key, held, max_concurrent, retry_after, status)
        self.token = token
        return self

    @property
    def is_lease(self) -> bool:
        """Whether the token is a lease: not one shadow mode or an
        unavailable store gave, which counts toward nothing."""
        return self.token is not None and self.status == "ok"

    def renew(self, lease: Optional[Length] = None) -> bool:
        """Extend the lease to end no sooner than ``lease`` from now (None:
        its own length); False if it had ended (stop, or acquire again)."""
        if not self.is_lease:
            return False
        row = self._run(sql.SQL("SELECT {}(%s::text, %s::uuid, %s::interval)").format(
            self._function("pklimit_renew")),
            (self._stored, self.token, None if lease is None else _length(lease)))
        return bool(row[0])

    def release(self) -> bool:
        """Free the lease; False if it had ended, was released already or
        was no lease.  A token that is no lease is released all the same:
        an acquire applied after the call stopped waiting for it may have
        granted it."""
        if self.token is None:
            return False
        token, self.token = self.token, None
        row = self._run(sql.SQL("SELECT {}(%s::text, %s::uuid)").format(
            self._function("pklimit_release")), (self._stored, token))
        return bool(row[0])

    def __enter__(self) -> "Lease":
        return self.acquire()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.release()
        except Exception:
            if exc_type is None:
                raise
            # the block's own exception goes on; the lease ends by itself
            log.warning("pklimit: the lease on %r could not be released", self.key, exc_info=True)

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._copy():
                return func(*args, **kwargs)
        return wrapper  # type: ignore[return-value]


def lease(conn: Any, key: str, max_concurrent: Optional[int] = None, lease: Optional[Length] = None,
          *, policy: Optional[str] = None, schema: Optional[str] = None,
          tenant: Optional[str] = None) -> Lease:
    """A lease on ``key``: at most ``max_concurrent`` (0 to 1000) at once,
    each live for ``lease`` (an interval string such as ``"15 minutes"``, a
    timedelta, or seconds) unless released or renewed; or, with ``policy``,
    the policy's ``max_count`` and ``window``.  ``tenant`` sets
    ``platformkit.tenant`` for its statements (None: the tenant
    ``pklimit.limits.using_tenant`` set, else the session's).  Use it with
    ``with`` or as a decorator."""
    return Lease(conn, key, max_concurrent, lease, policy=policy, schema=schema, tenant=tenant)
