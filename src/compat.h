/*-------------------------------------------------------------------------
 *
 * compat.h
 *		The differences between the PostgreSQL majors pklimit supports (15,
 *		17 and 18), in one place: the rest of the code uses these names and
 *		never tests PG_VERSION_NUM itself.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_COMPAT_H
#define PKLIMIT_COMPAT_H

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#if PG_VERSION_NUM >= 160000
#include "nodes/miscnodes.h"
#endif

/* This backend's number in ProcGlobal->allProcs, whose latch others set. */
#if PG_VERSION_NUM >= 170000
#define PKLIMIT_MY_PROCNO	((int) MyProcNumber)
#else
#define PKLIMIT_MY_PROCNO	(MyProc->pgprocno)
#endif

/* Does role own database dboid? */
#if PG_VERSION_NUM >= 160000
#define pklimit_database_owner(dboid, roleid) \
	object_ownercheck(DatabaseRelationId, (dboid), (roleid))
#else
#define pklimit_database_owner(dboid, roleid) \
	pg_database_ownercheck((dboid), (roleid))
#endif

/* MAINTAIN (VACUUM, ANALYZE, LOCK TABLE, ...) is a privilege from 17. */
#ifdef ACL_MAINTAIN
#define PKLIMIT_ACL_MAINTAIN	ACL_MAINTAIN
#define PKLIMIT_MAINTAIN_NAME	", MAINTAIN"
#else
#define PKLIMIT_ACL_MAINTAIN	0
#define PKLIMIT_MAINTAIN_NAME	""
#endif

/*
 * Named wait events (pg_stat_activity.wait_event) exist from PostgreSQL 17;
 * before, every wait of an extension shows as "Extension".
 */
#if PG_VERSION_NUM >= 170000
#define PKLIMIT_NAMED_WAIT_EVENTS 1
#endif

/*
 * The "extra" of a setting's check hook: GUC memory from PostgreSQL 16
 * (freed with guc_free), malloc'd before.
 */
#if PG_VERSION_NUM >= 160000
#define pklimit_guc_malloc(size)	guc_malloc(LOG, (size))
#else
#define pklimit_guc_malloc(size)	malloc(size)
#endif

/* transaction_timeout, a setting the worker pins, exists from 17. */
#if PG_VERSION_NUM >= 170000
#define PKLIMIT_HAS_TRANSACTION_TIMEOUT 1
#endif

/* Intervals can be infinite from PostgreSQL 17. */
#ifdef INTERVAL_NOT_FINITE
#define pklimit_interval_is_finite(i)	(!INTERVAL_NOT_FINITE(i))
#else
#define pklimit_interval_is_finite(i)	true
#endif

/*
 * Read an interval from text without raising an error: false if it is not
 * one.  PostgreSQL 16 reads input softly; before, the error is caught (the
 * input function holds no resources, so nothing is left behind).
 */
static inline bool
pklimit_parse_interval(const char *text, Interval *result)
{
#if PG_VERSION_NUM >= 160000
	ErrorSaveContext escontext = {T_ErrorSaveContext};
	Datum		d;

	if (!DirectInputFunctionCallSafe(interval_in, unconstify(char *, text),
									 InvalidOid, -1, (Node *) &escontext, &d))
		return false;
	*result = *DatumGetIntervalP(d);
	return true;
#else
	MemoryContext context = CurrentMemoryContext;
	volatile bool ok = true;

	PG_TRY();
	{
		*result = *DatumGetIntervalP(DirectFunctionCall3(interval_in,
														 CStringGetDatum(text),
														 ObjectIdGetDatum(InvalidOid),
														 Int32GetDatum(-1)));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(context);
		FlushErrorState();
		ok = false;
	}
	PG_END_TRY();
	return ok;
#endif
}

/* PostgreSQL 18 gives index_beginscan() an instrumentation argument. */
#if PG_VERSION_NUM >= 180000
#define pklimit_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define pklimit_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

#endif							/* PKLIMIT_COMPAT_H */
