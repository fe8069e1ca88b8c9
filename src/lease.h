/*-------------------------------------------------------------------------
 *
 * lease.h
 *		Concurrency limits (lease.c; docs/leases.md): a key's leases as one
 *		row of platformkit_leases holds them, and the rules of acquiring,
 *		releasing and renewing one.  The rules are pure; the worker applies
 *		them to the key's locked row (unit.c, store.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_LEASE_H
#define PKLIMIT_LEASE_H

#include "datatype/timestamp.h"
#include "utils/uuid.h"

#include "limit.h"

/*
 * Most leases live at once on one key (max_concurrent): a call reads and
 * writes them all, so the cap bounds its cost.
 */
#define PKLIMIT_LEASES_MAX 1000

/* The table of the leases, in the schema of pklimit's functions. */
#define PKLIMIT_LEASE_TABLE "platformkit_leases"

/* One lease. */
typedef struct PklimitLease
{
	pg_uuid_t	token;
	TimestampTz acquired_at;
	TimestampTz expires_at;		/* live while the clock is before it */
	int64		lease_usec;		/* the length it was acquired with */
} PklimitLease;

/* A key's row of platformkit_leases. */
typedef struct PklimitLeaseRow
{
	bool		exists;
	int			n;
	int64		max_concurrent; /* the last acquire's */
	PklimitLease leases[PKLIMIT_LEASES_MAX];
} PklimitLeaseRow;

extern bool pklimit_lease_acquire(PklimitLeaseRow *row, int64 max_concurrent,
								  int64 lease_usec, const pg_uuid_t *token,
								  TimestampTz now, PklimitResult *result);
extern bool pklimit_lease_release(PklimitLeaseRow *row, const pg_uuid_t *token,
								  TimestampTz now, PklimitResult *result);
extern bool pklimit_lease_renew(PklimitLeaseRow *row, const pg_uuid_t *token,
								int64 lease_usec, TimestampTz now,
								PklimitResult *result);
extern TimestampTz pklimit_lease_held_until(const PklimitLeaseRow *row);

#endif							/* PKLIMIT_LEASE_H */
