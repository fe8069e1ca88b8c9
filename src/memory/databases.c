/*-------------------------------------------------------------------------
 *
 * databases.c
 *		Each database's part of the memory path's table: its place in
 *		databases[], its share of the keys (the rule is shares.c's), its
 *		lifecycle (a worker attaches, memory opens with each flush and
 *		closes when the worker exits, the worker detaches; DROP EXTENSION
 *		and DROP DATABASE), and eviction: the least recently used keys given
 *		back so that a key can be read in, or so that other databases get
 *		their share.  What pklimit_memory_stats shows of a database is read
 *		here too.  Nothing here decides a call or touches pklimit's table.
 *
 * Locking: memory_private.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "memory_private.h"
#include "shares.h"
#include "stats.h"

/* Of the keys that may be given back, the part given back at once. */
#define MEMORY_EVICT_PERCENT 5

/* The index of dboid in databases[], or -1.  Control lock held. */
int
pklimit_memory_database_index(Oid dboid)
{
	if (!OidIsValid(dboid))
		return -1;				/* unused ones have no database */
	for (int d = 0; d < MEMORY_DATABASES; d++)
		if (database_at(d)->dboid == dboid)
			return d;
	return -1;
}

/*
 * This database's index in databases[], or -1.  It keeps its index while
 * the worker serves it or it holds keys, which every caller here needs.
 */
int
pklimit_memory_this_database(void)
{
	int			d;

	LWLockAcquire(control_lock(), LW_SHARED);
	d = pklimit_memory_database_index(MyDatabaseId);
	LWLockRelease(control_lock());
	return d;
}

/*
 * The index of dboid, claimed if it has none; -1 if none is free.  Control
 * lock held exclusively.
 */
int
pklimit_memory_claim_database(Oid dboid)
{
	int			d = pklimit_memory_database_index(dboid);

	if (d >= 0)
		return d;
	for (d = 0; d < MEMORY_DATABASES; d++)
	{
		MemoryDatabase *db = database_at(d);

		if (!OidIsValid(db->dboid))
		{
			db->dboid = dboid;
			db->held = 0;
			db->worker = false;
			pg_atomic_write_u64(&db->flushed_through, 0);
			return d;
		}
	}
	return -1;
}

/* A database with no key and no worker gives its index back. */
static void
release_database_if_unused(int d)
{
	MemoryDatabase *db = database_at(d);

	if (db->held == 0 && !db->worker)
	{
		db->dboid = InvalidOid;
		pg_atomic_write_u64(&db->flushed_through, 0);
	}
}

/*
 * The keys a database keeps: pklimit_memory_keys / pklimit_max_workers, as
 * the request queue's shares (security.md, "shares").
 */
static int
memory_share(void)
{
	return Max(1, pklimit_memory_keys / pklimit_max_workers);
}

/*
 * The keys of their shares that the served databases other than d leave
 * unused.  Control lock held.
 */
static int
others_unused(int d)
{
	int			share = memory_share();
	int			unused = 0;

	for (int o = 0; o < MEMORY_DATABASES; o++)
	{
		MemoryDatabase *db = database_at(o);

		if (o != d && OidIsValid(db->dboid) && db->worker)
			unused += pklimit_share_unused(share, db->held);
	}
	return unused;
}

/*
 * May database d take a free key now, by the rule of shares?  Otherwise
 * keys must be given back first.  Control lock held.
 */
bool
pklimit_memory_may_take(int d)
{
	return pklimit_share_verdict(memory_share(), database_at(d)->held, 1,
								 pklimit_memory_shared->nfree,
								 others_unused(d)) == PKLIMIT_SHARE_TAKE;
}

/* Is database d past its share?  Control lock held. */
static bool
past_share(int d)
{
	return pklimit_share_past(memory_share(), database_at(d)->held);
}

/* This database's index in databases[], claimed for it; -1 if none free. */
static int
my_database(void)
{
	int			d;

	LWLockAcquire(control_lock(), LW_EXCLUSIVE);
	d = pklimit_memory_claim_database(MyDatabaseId);
	LWLockRelease(control_lock());
	return d;
}

/* The worker of this database starts serving it. */
void
pklimit_memory_attach(void)
{
	int			d;

	if (!memory_on())
		return;
	LWLockAcquire(control_lock(), LW_EXCLUSIVE);
	d = pklimit_memory_claim_database(MyDatabaseId);
	if (d >= 0)
		database_at(d)->worker = true;
	LWLockRelease(control_lock());
}

/*
 * Close this database's memory: from now on no call is decided on its keys
 * until a flush opens it again.  Every partition lock is taken and
 * released after, so no call that saw it open is still deciding.
 */
void
pklimit_memory_close(void)
{
	int			d;

	if (!memory_on())
		return;
	d = pklimit_memory_this_database();
	if (d < 0)
		return;
	pg_atomic_write_u64(&database_at(d)->flushed_through, 0);
	for (int p = 0; p < MEMORY_PARTITIONS; p++)
	{
		LWLockAcquire(&pklimit_memory_shared->partition_locks[p].lock,
					  LW_EXCLUSIVE);
		LWLockRelease(&pklimit_memory_shared->partition_locks[p].lock);
	}
}

/* The worker leaves: its database's keys stay for its successor. */
void
pklimit_memory_detach(void)
{
	int			d;

	if (!memory_on())
		return;
	LWLockAcquire(control_lock(), LW_EXCLUSIVE);
	d = pklimit_memory_database_index(MyDatabaseId);
	if (d >= 0)
	{
		database_at(d)->worker = false;
		release_database_if_unused(d);
	}
	LWLockRelease(control_lock());
}

/* Every change before through is in a committed flush: memory opens. */
void
pklimit_memory_flushed_through(TimestampTz through)
{
	int			d;

	if (!memory_on())
		return;
	d = pklimit_memory_this_database();
	if (d >= 0)
		pg_atomic_write_u64(&database_at(d)->flushed_through,
							(uint64) through);
}

/* The generation of this database's keys, for those read in from now. */
uint32
pklimit_memory_generation(void)
{
	int			d;

	if (!memory_on())
		return 0;
	d = my_database();
	return d < 0 ? 0 : pg_atomic_read_u32(&database_at(d)->generation);
}

/*
 * After DROP EXTENSION pklimit committed: this database's keys are of a
 * table that is gone; the worker discards them.
 */
void
pklimit_memory_drop_extension(void)
{
	int			d;

	if (!memory_on())
		return;
	d = pklimit_memory_this_database();
	if (d >= 0)
		pg_atomic_fetch_add_u32(&database_at(d)->generation, 1);
}

/*
 * Take the key of directory item i out of the table.  Control lock and its
 * partition lock held exclusively.
 */
void
pklimit_memory_remove(int i)
{
	DirectoryItem *item = &pklimit_memory_directory[i];
	MemoryKey  *k = item->key;
	int			d = k->db;
	dsa_pointer bytes = k->tag.bytes.area;

	(void) hash_search_with_hash_value(pklimit_memory_table, &k->tag,
									   item->hashcode, HASH_REMOVE, NULL);
	/* (the area's locks are taken after every lock of the memory path's) */
	dsa_free(pklimit_memory_area(), bytes);
	item->key = NULL;
	item->dboid = InvalidOid;
	pklimit_memory_free_items[pklimit_memory_shared->nfree++] = i;
	database_at(d)->held--;
	release_database_if_unused(d);
}

/*
 * A key that may be given back: not on its way out, and written, or of a
 * dropped extension (whose changes have no table to go to).
 */
static bool
key_evictable(const MemoryKey *k)
{
	return !k->leaving && (k->changes == k->written || !key_current(k));
}

/*
 * May the key of item be given back for database d: its own, or of a
 * database past its share?  Its partition lock and the control lock held.
 */
static bool
may_give_back(const DirectoryItem *item, int d)
{
	return item->key != NULL &&
		(item->key->db == d || past_share(item->key->db)) &&
		key_evictable(item->key);
}

/*
 * A key found by a pass, to give back.  It is given back only if its item
 * still holds that key, unused since: a key's last use is a tick of the use
 * clock, which no two uses share, and reading a key in takes a new tick, so
 * a key read in since into the same item (even into the same hash element,
 * freed and taken again) never matches.
 */
typedef struct Candidate
{
	int			item;
	MemoryKey  *key;
	uint64		last_used;
	bool		once;			/* used once since read in */
} Candidate;

/* Keys to give back, least recently used first; c[next] the first left. */
typedef struct CandidateQueue
{
	Candidate  *c;
	int			n;
	int			next;
} CandidateQueue;

/*
 * The worker's keys to give back for its database d, from its last pass
 * over the directory: the least recently used of all (for a key missed
 * before, or a database below its share) and of those used once since read
 * in (for a key seen for the first time: readin.c).  Only the worker gives
 * its database's keys back, so the queues are its own.
 */
static struct
{
	CandidateQueue any;
	CandidateQueue once;
	int			d;
	uint64		flushed_through;	/* its database's, at the pass */
}			queues = {{NULL, 0, 0}, {NULL, 0, 0}, -1, 0};

static int
compare_candidates(const void *a, const void *b)
{
	const Candidate *x = a;
	const Candidate *y = b;

	return x->last_used < y->last_used ? -1 : x->last_used > y->last_used;
}

/*
 * The keys database d may take the place of, least recently used first, at
 * most max of them (5% of the table), into out[], and if once_out is given,
 * the same of those used once since read in into once_out[] (*n_once of
 * them): one pass over the directory.  Returns how many are in out[].
 */
static int
find_candidates(int d, Candidate *out, int max, Candidate *once_out,
				int *n_once)
{
	Candidate  *all = palloc(sizeof(Candidate) * pklimit_memory_keys);
	int			n = 0;

	LWLockAcquire(control_lock(), LW_SHARED);
	for (int i = 0; i < pklimit_memory_keys; i++)
	{
		DirectoryItem *item = &pklimit_memory_directory[i];
		LWLock	   *lock;

		if (item->key == NULL)
			continue;
		lock = partition_lock(item->hashcode);
		LWLockAcquire(lock, LW_SHARED);
		if (may_give_back(item, d))
		{
			all[n].item = i;
			all[n].key = item->key;
			all[n].once = item->key->uses == 1;
			all[n++].last_used = item->key->last_used;
		}
		LWLockRelease(lock);
	}
	LWLockRelease(control_lock());
	qsort(all, n, sizeof(Candidate), compare_candidates);
	if (once_out != NULL)
	{
		*n_once = 0;
		for (int c = 0; c < n && *n_once < max; c++)
			if (all[c].once)
				once_out[(*n_once)++] = all[c];
	}
	n = Min(n, max);
	memcpy(out, all, sizeof(Candidate) * n);
	pfree(all);
	return n;
}

/*
 * Give candidate c's key back for database d, if it is still the key found,
 * unused since, and may still be given back.  Control lock held.
 */
static bool
give_back_candidate(const Candidate *c, int d)
{
	DirectoryItem *item = &pklimit_memory_directory[c->item];
	LWLock	   *lock = partition_lock(item->hashcode);
	bool		given = false;

	LWLockAcquire(lock, LW_EXCLUSIVE);
	if (item->key == c->key && c->key->last_used == c->last_used &&
		may_give_back(item, d))
	{
		pklimit_memory_remove(c->item);
		given = true;
	}
	LWLockRelease(lock);
	return given;
}

/* Most candidates found by one pass: 5% of the table. */
static int
most_candidates(void)
{
	return Max(1, pklimit_memory_keys * MEMORY_EVICT_PERCENT / 100);
}

/* A new pass over the directory for database d's queues. */
static void
queues_refill(int d)
{
	MemoryDatabase *db = database_at(d);

	if (queues.any.c == NULL)
	{
		Size		size = sizeof(Candidate) * most_candidates();

		queues.any.c = MemoryContextAlloc(TopMemoryContext, size);
		queues.once.c = MemoryContextAlloc(TopMemoryContext, size);
	}
	queues.any.n = find_candidates(d, queues.any.c, most_candidates(),
								   queues.once.c, &queues.once.n);
	queues.any.next = queues.once.next = 0;
	queues.d = d;
	queues.flushed_through = pg_atomic_read_u64(&db->flushed_through);
}

/*
 * Give back the first key of q that can still be given back for database
 * d, taking from q the ones that cannot.  Counts it; returns whether one
 * was.
 */
static bool
give_back_first(CandidateQueue *q, int d)
{
	bool		given = false;

	LWLockAcquire(control_lock(), LW_EXCLUSIVE);
	while (!given && q->next < q->n)
		given = give_back_candidate(&q->c[q->next++], d);
	LWLockRelease(control_lock());
	if (given)
		pklimit_stats_add(PKLIMIT_STAT_MEMORY_EVICTIONS, 1);
	return given;
}

/*
 * Give back one key so database d may take its place: of its own, or of a
 * database past its share, least recently used first.  The worker's last
 * pass found the least recently used keys (most_candidates of them); they
 * are given back one at a time, as keys come in, skipping any used or
 * changed since, and another pass is made once they are gone.  So no free
 * place is left for a key the admission rule (readin.c) would keep out.
 * Counts it, as one of the places keys are given back; returns 1, or 0 if
 * none could be.
 */
int
pklimit_memory_give_back(int d)
{
	for (int pass = 0; pass < 2; pass++)
	{
		if (queues.any.next >= queues.any.n || queues.d != d)
		{
			if (pass > 0 && queues.d == d && queues.any.n == 0)
				break;			/* nothing to give back */
			queues_refill(d);
		}
		if (give_back_first(&queues.any, d))
			return 1;
	}
	return 0;
}

/*
 * Give back this database's least recently used key of those used once
 * since read in, for a key seen for the first time (readin.c).  Such keys
 * are found by the worker's pass; when none is left, a new pass is made
 * at once if the last one found as many as a pass takes, and otherwise only
 * once a flush has written keys since (most keys can be given back only
 * once written), so that a table of keys in use is not walked on every
 * miss.  Returns whether one was given back.
 */
bool
pklimit_memory_give_back_one_off(void)
{
	int			d;

	if (!memory_on())
		return false;
	d = pklimit_memory_this_database();
	if (d < 0)
		return false;
	if (queues.d != d ||
		(queues.once.next >= queues.once.n &&
		 (queues.once.n == most_candidates() ||
		  queues.flushed_through !=
		  pg_atomic_read_u64(&database_at(d)->flushed_through))))
		queues_refill(d);
	return give_back_first(&queues.once, d);
}

/*
 * Give back keys of database d at once, least recently used first (5% of
 * the table at most), for the other databases' shares.  Counts them;
 * returns how many.
 */
static int
give_back_many(int d)
{
	Candidate  *candidates = palloc(sizeof(Candidate) * most_candidates());
	int			n = find_candidates(d, candidates, most_candidates(), NULL,
									NULL);
	int			evicted = 0;

	LWLockAcquire(control_lock(), LW_EXCLUSIVE);
	for (int c = 0; c < n; c++)
		evicted += give_back_candidate(&candidates[c], d) ? 1 : 0;
	LWLockRelease(control_lock());
	pfree(candidates);
	pklimit_stats_add(PKLIMIT_STAT_MEMORY_EVICTIONS, evicted);
	return evicted;
}

/*
 * Is this database's memory open but its flush lag past the bound now?  Then
 * the worker reads no key in: its calls could not be decided there anyway.
 * Closed memory (a worker before its first flush) does not lag.
 */
bool
pklimit_memory_lagging(void)
{
	int			d;
	uint64		through;

	if (!memory_on())
		return false;
	d = pklimit_memory_this_database();
	if (d < 0)
		return false;
	through = pg_atomic_read_u64(&database_at(d)->flushed_through);
	return through != 0 && !lag_within_bound(through, GetCurrentTimestamp());
}

/*
 * May this database take a key in without the admission rule: is a free one
 * there for it, or does it hold fewer than its share (and so may take the
 * place of keys of databases past theirs)?
 */
bool
pklimit_memory_room(void)
{
	int			d;
	bool		room;

	if (!memory_on())
		return false;
	LWLockAcquire(control_lock(), LW_SHARED);
	d = pklimit_memory_database_index(MyDatabaseId);
	room = d < 0 ? pklimit_memory_shared->nfree > 0 :
		(database_at(d)->held < memory_share() || pklimit_memory_may_take(d));
	LWLockRelease(control_lock());
	return room;
}

/* Does this database hold keys? */
bool
pklimit_memory_held(void)
{
	int			d;
	bool		held;

	if (!memory_on())
		return false;
	LWLockAcquire(control_lock(), LW_SHARED);
	d = pklimit_memory_database_index(MyDatabaseId);
	held = d >= 0 && database_at(d)->held > 0;
	LWLockRelease(control_lock());
	return held;
}

/*
 * Give back keys of this database past its share while other served
 * databases' shares are short of free keys.
 */
void
pklimit_memory_shed(void)
{
	int			d;
	bool		shed;

	if (!memory_on())
		return;
	LWLockAcquire(control_lock(), LW_SHARED);
	d = pklimit_memory_database_index(MyDatabaseId);
	shed = d >= 0 &&
		pklimit_share_owed(memory_share(), database_at(d)->held,
						   pklimit_memory_shared->nfree, others_unused(d));
	LWLockRelease(control_lock());
	if (shed)
		(void) give_back_many(d);
}

/*
 * DROP DATABASE dboid: its keys go, unwritten.  No worker serves it any
 * more.
 */
void
pklimit_memory_forget_database(Oid dboid)
{
	int			d;

	if (!memory_on())
		return;
	LWLockAcquire(control_lock(), LW_EXCLUSIVE);
	for (int i = 0; i < pklimit_memory_keys; i++)
	{
		DirectoryItem *item = &pklimit_memory_directory[i];
		LWLock	   *lock;

		if (item->dboid != dboid)
			continue;
		lock = partition_lock(item->hashcode);
		LWLockAcquire(lock, LW_EXCLUSIVE);
		if (item->key != NULL && item->dboid == dboid)
			pklimit_memory_remove(i);
		LWLockRelease(lock);
	}
	d = pklimit_memory_database_index(dboid);
	if (d >= 0)
	{
		database_at(d)->worker = false;
		release_database_if_unused(d);
	}
	LWLockRelease(control_lock());
}

/*
 * What pklimit_memory_stats shows of database dboid's memory: the keys it
 * holds and its flush lag in milliseconds (-1: none, or closed).
 */
void
pklimit_memory_database_stats(Oid dboid, int64 *held, double *lag_ms)
{
	int			d;

	*held = 0;
	*lag_ms = -1;
	if (!memory_on())
		return;
	LWLockAcquire(control_lock(), LW_SHARED);
	d = pklimit_memory_database_index(dboid);
	if (d >= 0)
	{
		uint64		through = pg_atomic_read_u64(&database_at(d)->flushed_through);

		*held = database_at(d)->held;
		/* a clock stepped back shows as lag, as lag_within_bound counts it */
		if (through != 0)
		{
			int64		lag = GetCurrentTimestamp() - (TimestampTz) through;

			*lag_ms = (double) (lag < 0 ? -lag : lag) / 1000.0;
		}
	}
	LWLockRelease(control_lock());
}
