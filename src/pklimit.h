/*-------------------------------------------------------------------------
 *
 * pklimit.h
 *		Declarations shared by pklimit's source files: the operations the
 *		store applies, the key encoding and the settings.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_H
#define PKLIMIT_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* Longest stored key kept readable; longer ones are stored as a digest. */
#define PKLIMIT_MAX_READABLE_KEY 256

/* What one request asks of the table. */
typedef enum PklimitOpKind
{
	PKLIMIT_OP_HIT,				/* record events, return the new count */
	PKLIMIT_OP_COUNT,			/* read the count of the open window */
	PKLIMIT_OP_FORGET			/* delete the key's row */
} PklimitOpKind;

/* The answer to one operation. */
typedef struct PklimitResult
{
	bool		found;			/* a row existed (count, forget) */
	int64		count;			/* count after the operation */
	TimestampTz window_end;		/* end of the window the count belongs to */
	TimestampTz event_at;		/* server clock when the event was recorded */
} PklimitResult;

/* settings (pklimit.c) */
extern int	pklimit_default_max;
extern int	pklimit_default_window;

/* key.c */
extern char *pklimit_stored_key(text *key);

/* store.c: applies one operation to the table, in the current transaction */
extern void pklimit_store_apply(Oid nspid, PklimitOpKind kind,
								const char *stored_key, int64 window_usec,
								int64 events, PklimitResult *result);
extern int64 pklimit_store_purge(Oid nspid, TimestampTz cutoff);
extern bool pklimit_in_system;

#endif							/* PKLIMIT_H */
