/*-------------------------------------------------------------------------
 *
 * shares.h
 *		The one rule of shares (shares.c; docs/security.md, "No database
 *		takes another's share of the service"), for the two pools every
 *		database uses: the request queue's slots (queue.c) and the memory
 *		path's keys (memory/databases.c).  Each pool says who shares it,
 *		how big a share is and what each database holds; the rule is
 *		here, once.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_SHARES_H
#define PKLIMIT_SHARES_H

/* May a database take n more places of a pool? */
typedef enum PklimitShareVerdict
{
	PKLIMIT_SHARE_TAKE,			/* yes: free places it may take */
	PKLIMIT_SHARE_MAKE_ROOM,	/* within its share, but too few are free: it
								 * may take back places of databases past
								 * theirs */
	PKLIMIT_SHARE_REFUSE		/* past its share: what is free is kept for
								 * the others' shares */
} PklimitShareVerdict;

extern PklimitShareVerdict pklimit_share_verdict(int share, int held, int n,
												 int nfree, int others_unused);
extern int	pklimit_share_unused(int share, int held);
extern bool pklimit_share_past(int share, int held);
extern bool pklimit_share_owed(int share, int held, int nfree,
							   int others_unused);

#endif							/* PKLIMIT_SHARES_H */
