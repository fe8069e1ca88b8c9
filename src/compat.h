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
#include "storage/proc.h"

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

/*
 * Named wait events (pg_stat_activity.wait_event) exist from PostgreSQL 17;
 * before, every wait of an extension shows as "Extension".
 */
#if PG_VERSION_NUM >= 170000
#define PKLIMIT_NAMED_WAIT_EVENTS 1
#endif

/* Intervals can be infinite from PostgreSQL 17. */
#ifdef INTERVAL_NOT_FINITE
#define pklimit_interval_is_finite(i)	(!INTERVAL_NOT_FINITE(i))
#else
#define pklimit_interval_is_finite(i)	true
#endif

#endif							/* PKLIMIT_COMPAT_H */
