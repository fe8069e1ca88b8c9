/*-------------------------------------------------------------------------
 *
 * shares.c
 *		The one rule of shares, a security property (docs/security.md, "No
 *		database takes another's share of the service"): of a pool every
 *		database uses, each database that shares it keeps a share, and no
 *		database takes another's.  The request queue's slots (queue.c) and
 *		the memory path's keys (memory/databases.c) follow it; each pool
 *		counts who shares it and what each holds, under its own lock, and
 *		asks here.  Pure functions of those counts: nothing here knows a
 *		pool, a lock or a database.
 *
 * The guarantee, for a database that holds held places of share each:
 *
 *	within its share	it gets any free place, and where too few are free
 *						it may take back places of databases past their
 *						share (the queue's youngest requests of theirs, the
 *						memory path's written keys of theirs)
 *	past its share		it gets a place only while what stays free still
 *						covers the others' unused shares
 *
 * So a database alone may fill a pool, and a flood fills only its own
 * share and what nobody else needs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "shares.h"

/*
 * May a database that holds held places take n more, of nfree free, while
 * the other databases that share the pool leave others_unused places of
 * their shares unused?  (MAKE_ROOM: within its share, it may take places
 * back from databases past theirs, then ask again.)
 */
PklimitShareVerdict
pklimit_share_verdict(int share, int held, int n, int nfree, int others_unused)
{
	if (held + n <= share)
		return nfree >= n ? PKLIMIT_SHARE_TAKE : PKLIMIT_SHARE_MAKE_ROOM;
	return nfree - n >= others_unused ? PKLIMIT_SHARE_TAKE :
		PKLIMIT_SHARE_REFUSE;
}

/* The places of its share a database holding held leaves unused. */
int
pklimit_share_unused(int share, int held)
{
	return Max(0, share - held);
}

/* Is a database holding held past its share: may its places be taken back? */
bool
pklimit_share_past(int share, int held)
{
	return held > share;
}

/*
 * Must a database holding held give places back now: past its share, while
 * the others' unused shares need more places than are free?
 */
bool
pklimit_share_owed(int share, int held, int nfree, int others_unused)
{
	return pklimit_share_past(share, held) && others_unused > nfree;
}
