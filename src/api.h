/*-------------------------------------------------------------------------
 *
 * api.h
 *		What the SQL-callable functions share (api.c): checking their
 *		arguments, running their requests (in memory, or through the queue)
 *		and what a call answers when the store cannot be reached.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_API_H
#define PKLIMIT_API_H

#include "fmgr.h"

#include "request.h"

/* Which caller found the store unavailable, for pklimit_unavailable(). */
typedef enum PklimitCaller
{
	PKLIMIT_CALL_DECIDES,		/* allow, check: as on_unavailable says */
	PKLIMIT_CALL_READS,			/* count, forget, decrement: return NULL */
	PKLIMIT_CALL_PURGES			/* purge: always an error */
} PklimitCaller;

/* A purge held up by locked rows for this long fails (with api.c's error). */
#define PKLIMIT_PURGE_LOCK_SECONDS 5

extern TimestampTz pklimit_run(FunctionCallInfo fcinfo,
							   PklimitRequest *requests,
							   PklimitAnswer *answers, int n);
extern void pklimit_arg_not_null(FunctionCallInfo fcinfo, int argno,
								 const char *what);
extern void pklimit_key_check(text *key, const char *what);
extern char *pklimit_key_value(text *key, const char *what);
extern int64 pklimit_max_count_value(int64 max_count, const char *what);
extern bool pklimit_unavailable(const PklimitAnswer *answer,
								PklimitCaller caller);
extern bool pklimit_unavailable_allows(void);
extern const char *pklimit_status_name(PklimitStatus status);

#endif							/* PKLIMIT_API_H */
