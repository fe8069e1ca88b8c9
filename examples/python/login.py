#!/usr/bin/python3
"""A login handler rate limited with pklimit (psycopg 3, Debian's python3-psycopg).

Reads attempts from stdin, one "user tenant address password" per line (a
tenant of "-" means no tenant), and prints one line per attempt:

    alice acme 10.0.0.1 wrong -> 401 remaining=4
    alice acme 10.0.0.1 wrong -> 429 retry_after=900
    alice acme 10.0.0.1 s3cret -> 200

Two limits guard a login, checked and recorded together in one
pklimit_check_all call: 5 attempts per account per 15 minutes, and 8 per
source address per hour (credential stuffing tries many accounts from one
address).

The connection comes from the usual libpq environment (PGHOST, PGPORT,
PGDATABASE, PGUSER, ...) or from the DATABASE_URL environment variable.
"""
import hashlib
import hmac
import math
import os
import sys

import psycopg

ACCOUNT_LIMIT, ACCOUNT_WINDOW = 5, "15 minutes"
ADDRESS_LIMIT, ADDRESS_WINDOW = 8, "1 hour"

# A fake user table: user -> (salt, hash). The stored hashes are computed here
# so the example needs no real user store.
SALT = b"pklimit-example"


def fake_hash(password: str) -> bytes:
    """Deliberately slow, as a password hash should be (PBKDF2-SHA256)."""
    return hashlib.pbkdf2_hmac("sha256", password.encode(), SALT, 10_000)


USERS = {"alice": fake_hash("s3cret"), "bob": fake_hash("hunter2")}


def login(conn, user: str, tenant: str, address: str, password: str):
    """One request: returns (HTTP status, headers)."""
    with conn.transaction():
        # The tenant for this transaction only: set_config(..., true) is
        # SET LOCAL, with the tenant as a bind parameter. It ends with the
        # transaction, so a pooled server connection never carries it over.
        conn.execute("SELECT set_config('platformkit.tenant', %s, true)", (tenant,))
        # Count the attempt BEFORE the expensive hash, so a refused attempt
        # costs the server nothing: both limits in one call, one row each.
        allowed, remaining, retry_after, status = conn.execute(
            "SELECT bool_and(allowed), min(remaining),"
            " ceil(extract(epoch FROM max(retry_after)))::bigint, min(status)"
            " FROM pklimit_check_all(ARRAY['login:' || %s, 'ip:' || %s],"
            " ARRAY[%s::bigint, %s::bigint], ARRAY[%s::interval, %s::interval])",
            (user, address, ACCOUNT_LIMIT, ADDRESS_LIMIT, ACCOUNT_WINDOW, ADDRESS_WINDOW),
        ).fetchone()
        headers = {}
        if remaining is not None:
            headers["RateLimit-Remaining"] = str(remaining)
        if status != "ok":
            headers["X-RateLimit-Status"] = status
        if not allowed:
            if retry_after is not None:
                headers["Retry-After"] = str(retry_after)
            return 429, headers
        stored = USERS.get(user)
        supplied = fake_hash(password)
        if stored is not None and hmac.compare_digest(stored, supplied):
            conn.execute("SELECT pklimit_forget('login:' || %s)", (user,))
            return 200, {}
        return 401, headers


def describe(status, headers):
    if status == 429:
        return f"429 retry_after={headers.get('Retry-After', 'unknown')}"
    if status == 401:
        line = f"401 remaining={headers.get('RateLimit-Remaining', 'unknown')}"
    else:
        line = str(status)
    if "X-RateLimit-Status" in headers:
        line += f" status={headers['X-RateLimit-Status']}"
    return line


def main():
    # prepare_threshold=None: no server-side prepared statements, so the
    # handler also works behind pgbouncer in transaction pooling mode.
    with psycopg.connect(os.environ.get("DATABASE_URL", ""), autocommit=True,
                         prepare_threshold=None) as conn:
        for line in sys.stdin:
            fields = line.split()
            if not fields:
                continue
            user, tenant, address, password = fields
            status, headers = login(conn, user, "" if tenant == "-" else tenant, address, password)
            print(f"{user} {tenant} {address} {password} -> {describe(status, headers)}", flush=True)


if __name__ == "__main__":
    main()
