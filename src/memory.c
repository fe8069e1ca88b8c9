/*-------------------------------------------------------------------------
 *
 * memory.c
 *		The memory path's table in shared memory (docs/memory.md): keys'
 *		states, decided on by calls with durable => false in the calling
 *		backend and by the worker for calls it finds there; the entries'
 *		directory, which the worker walks to flush; the shares of the
 *		databases (their rule is shares.c's); and the least recently used
 *		entries given back.  What a
 *		call decides is limit.c's; writing entries to the table is
 *		flush.c's, in the worker's transactions.  Nothing here touches the
 *		table, and only the worker puts entries in.
 *
 * Locking (see also pklimit.h): the table is split into
 * MEMORY_PARTITIONS partitions by the hash of the key, each with an LWLock
 * that protects its entries and the directory slots that point at them,
 * taken exclusively to change either (a call decided, an entry put in or
 * taken out) and shared to read.  The control lock protects the free
 * slots, each database's entry (but its flushed_through and generation,
 * atomics read under a partition lock) and its held count.  Order:
 * pklimit_lock, then the control lock, then partition locks in ascending
 * order.  No lock is held across I/O, a transaction or a wait, and nothing
 * that can raise an error runs under one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "pklimit.h"
#include "shares.h"

/* Partitions of the table, each with its lock (a power of 2). */
#define MEMORY_PARTITIONS 128

/* Databases that can hold entries at once. */
#define MEMORY_DATABASES 64

/* Of the entries that may be given back, the share given back at once. */
#define MEMORY_EVICT_PERCENT 5

/* A key in memory: its database, its extension's schema, its stored key. */
typedef struct MemoryKey
{
	Oid			dboid;
	Oid			nspid;
	char		key[PKLIMIT_MAX_READABLE_KEY + 1];
} MemoryKey;

/* One key's state.  Protected by its partition's lock. */
typedef struct MemoryEntry
{
	MemoryKey	key;			/* the hash key: first */
	int			slot;			/* its directory slot */
	int			db;				/* its database's entry in databases[] */
	uint32		generation;		/* of its database when read in */
	Oid			relid;			/* the table it was read from */
	bool		leaving;		/* the worker takes it out: calls on it take
								 * the durable path */
	PklimitRow	row;			/* the key's state */
	uint64		changes;		/* changes made to it since read in */
	uint64		written;		/* of them, in a committed flush */
	uint64		last_used;		/* the use clock when last used */
} MemoryEntry;

/*
 * A directory slot: the entry of one key in use, so the worker finds its
 * database's entries without walking the hash table.  Changed under the
 * control lock and the partition lock of hashcode, both exclusive; read
 * under that partition lock (a reader takes hashcode first, then checks the
 * slot again under its lock).
 */
typedef struct MemorySlot
{
	MemoryEntry *entry;			/* NULL: free */
	uint32		hashcode;
	Oid			dboid;
} MemorySlot;

/* A database's part of the table. */
typedef struct MemoryDatabase
{
	Oid			dboid;			/* InvalidOid: unused; control lock */
	int			held;			/* entries it holds; control lock */
	bool		worker;			/* a worker serves it; control lock */
	pg_atomic_uint32 generation;	/* entries of another are not its keys any
									 * more (DROP EXTENSION) */
	pg_atomic_uint64 flushed_through;	/* every change before this moment is
										 * in a committed flush; 0: closed */
} MemoryDatabase;

typedef struct MemoryShared
{
	LWLockPadded *partition_locks;
	LWLock	   *control_lock;
	int			nfree;			/* free slots, at free[0 .. nfree-1] */
	pg_atomic_uint64 use_clock; /* ticks once per use of an entry: the order
								 * of uses, which no two share (the wall
								 * clock's microseconds can, and can step
								 * back) */
	MemoryDatabase databases[MEMORY_DATABASES];
} MemoryShared;

static MemoryShared *shared = NULL;
static HTAB *entries = NULL;
static MemorySlot *slots = NULL;	/* pklimit_memory_keys */
static int *free_slots = NULL;	/* pklimit_memory_keys */

static uint32
key_hash(const void *key, Size keysize)
{
	const MemoryKey *k = key;
	uint32		h = hash_bytes((const unsigned char *) k->key, strlen(k->key));

	h = hash_combine(h, hash_bytes_uint32(k->dboid));
	return hash_combine(h, hash_bytes_uint32(k->nspid));
}

static int
key_match(const void *a, const void *b, Size keysize)
{
	const MemoryKey *x = a;
	const MemoryKey *y = b;

	if (x->dboid != y->dboid || x->nspid != y->nspid)
		return 1;
	return strcmp(x->key, y->key);
}

static LWLock *
partition_lock(uint32 hashcode)
{
	return &shared->partition_locks[hashcode % MEMORY_PARTITIONS].lock;
}

Size
pklimit_memory_shmem_size(void)
{
	Size		size = MAXALIGN(sizeof(MemoryShared));

	if (pklimit_memory_keys == 0)
		return size;
	size = add_size(size, hash_estimate_size(pklimit_memory_keys,
											 sizeof(MemoryEntry)));
	size = add_size(size, mul_size(pklimit_memory_keys, sizeof(MemorySlot)));
	return add_size(size, mul_size(pklimit_memory_keys, sizeof(int)));
}

void
pklimit_memory_shmem_request(void)
{
	RequestNamedLWLockTranche("pklimit_memory", MEMORY_PARTITIONS);
	RequestNamedLWLockTranche("pklimit_memory_control", 1);
}

/* At shared memory setup, with AddinShmemInitLock held. */
void
pklimit_memory_shmem_init(void)
{
	bool		found;
	HASHCTL		info;

	shared = ShmemInitStruct("pklimit memory", sizeof(MemoryShared), &found);
	if (!found)
	{
		memset(shared, 0, sizeof(MemoryShared));
		shared->partition_locks = GetNamedLWLockTranche("pklimit_memory");
		shared->control_lock =
			&GetNamedLWLockTranche("pklimit_memory_control")->lock;
		pg_atomic_init_u64(&shared->use_clock, 1);
		for (int d = 0; d < MEMORY_DATABASES; d++)
		{
			pg_atomic_init_u32(&shared->databases[d].generation, 1);
			pg_atomic_init_u64(&shared->databases[d].flushed_through, 0);
		}
	}
	if (pklimit_memory_keys == 0)
		return;
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(MemoryKey);
	info.entrysize = sizeof(MemoryEntry);
	info.hash = key_hash;
	info.match = key_match;
	info.num_partitions = MEMORY_PARTITIONS;
	entries = ShmemInitHash("pklimit memory keys", pklimit_memory_keys,
							pklimit_memory_keys, &info,
							HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
							HASH_PARTITION | HASH_FIXED_SIZE);
	slots = ShmemInitStruct("pklimit memory directory",
							mul_size(pklimit_memory_keys, sizeof(MemorySlot)),
							&found);
	free_slots = ShmemInitStruct("pklimit memory free slots",
								 mul_size(pklimit_memory_keys, sizeof(int)),
								 &found);
	if (!found)
	{
		memset(slots, 0, mul_size(pklimit_memory_keys, sizeof(MemorySlot)));
		for (int i = 0; i < pklimit_memory_keys; i++)
			free_slots[i] = pklimit_memory_keys - 1 - i;
		shared->nfree = pklimit_memory_keys;
	}
}

/* The use clock's next tick, for an entry used now (under its lock). */
static uint64
used_now(void)
{
	return pg_atomic_fetch_add_u64(&shared->use_clock, 1);
}

/* Is the memory path there at all (preloaded, with entries)? */
static bool
memory_on(void)
{
	return shared != NULL && entries != NULL;
}

/* The entry of dboid in databases[], or -1.  Control lock held. */
static int
database_index(Oid dboid)
{
	if (!OidIsValid(dboid))
		return -1;				/* unused entries have no database */
	for (int d = 0; d < MEMORY_DATABASES; d++)
		if (shared->databases[d].dboid == dboid)
			return d;
	return -1;
}

/*
 * This database's entry in databases[], or -1.  It keeps its index while
 * the worker serves it or it holds entries, which every caller here needs.
 */
static int
this_database(void)
{
	int			d;

	LWLockAcquire(shared->control_lock, LW_SHARED);
	d = database_index(MyDatabaseId);
	LWLockRelease(shared->control_lock);
	return d;
}

/* The entry of dboid, claimed if it has none; -1 if none is free. */
static int
claim_database(Oid dboid)
{
	int			d = database_index(dboid);

	if (d >= 0)
		return d;
	for (d = 0; d < MEMORY_DATABASES; d++)
	{
		MemoryDatabase *db = &shared->databases[d];

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

/* A database with no entry and no worker gives its entry back. */
static void
release_database_if_unused(int d)
{
	MemoryDatabase *db = &shared->databases[d];

	if (db->held == 0 && !db->worker)
	{
		db->dboid = InvalidOid;
		pg_atomic_write_u64(&db->flushed_through, 0);
	}
}

/*
 * The entries a database keeps: pklimit_memory_keys / pklimit_max_workers,
 * as the request queue's shares (security.md, "shares").
 */
static int
memory_share(void)
{
	return Max(1, pklimit_memory_keys / pklimit_max_workers);
}

/*
 * The entries of their shares that the served databases other than d leave
 * unused.  Control lock held.
 */
static int
others_unused(int d)
{
	int			quota = memory_share();
	int			unused = 0;

	for (int o = 0; o < MEMORY_DATABASES; o++)
	{
		MemoryDatabase *db = &shared->databases[o];

		if (o != d && OidIsValid(db->dboid) && db->worker)
			unused += pklimit_share_unused(quota, db->held);
	}
	return unused;
}

/*
 * May database d take a free entry now, by the rule of shares (shares.c)?
 * Otherwise entries must be given back first.  Control lock held.
 */
static bool
may_take(int d)
{
	return pklimit_share_verdict(memory_share(), shared->databases[d].held, 1,
								 shared->nfree, others_unused(d)) ==
		PKLIMIT_SHARE_TAKE;
}

/* Is database d past its share?  Control lock held. */
static bool
past_share(int d)
{
	return pklimit_share_past(memory_share(), shared->databases[d].held);
}

/*
 * Is the state of entry e the truth of its key now: read in under its
 * database's generation?  Partition lock held.
 */
static bool
entry_current(const MemoryEntry *e)
{
	return e->generation ==
		pg_atomic_read_u32(&shared->databases[e->db].generation);
}

/*
 * Is memory open (through not 0) and the flush lag from through to now
 * within twice pklimit.flush_interval?  A clock stepped back counts as far
 * as one stepped on: until the worker's next flush sets through by the new
 * clock, nothing else says the flush still runs.
 */
static bool
lag_within_bound(uint64 through, TimestampTz now)
{
	int64		bound = (int64) 2 * pklimit_flush_interval * 1000;

	return through != 0 &&
		now - (TimestampTz) through <= bound &&
		(TimestampTz) through - now <= bound;
}

/*
 * May calls be decided on entry e now, so that the loss bound holds: its
 * database's flush lag is within the bound, and memory is not closed.
 * Partition lock held (so a close is seen).
 */
static bool
entry_flushed_enough(const MemoryEntry *e, TimestampTz now)
{
	return lag_within_bound(pg_atomic_read_u64(&shared->databases[e->db].flushed_through),
							now);
}

/* The keys of n requests, their hash codes, and the partitions to lock. */
typedef struct Lookup
{
	MemoryKey	keys[PKLIMIT_GROUP_MAX];
	uint32		hashcodes[PKLIMIT_GROUP_MAX];
	int			partitions[PKLIMIT_GROUP_MAX];	/* ascending, each once */
	int			npartitions;
	MemoryEntry *found[PKLIMIT_GROUP_MAX];
} Lookup;

static int
compare_int(const void *a, const void *b)
{
	return *(const int *) a - *(const int *) b;
}

static void
lookup_keys(const PklimitRequest *requests, int n, Lookup *l)
{
	int			parts[PKLIMIT_GROUP_MAX];

	for (int i = 0; i < n; i++)
	{
		l->keys[i].dboid = requests[i].dboid;
		l->keys[i].nspid = requests[i].nspid;
		strlcpy(l->keys[i].key, requests[i].key, sizeof(l->keys[i].key));
		l->hashcodes[i] = get_hash_value(entries, &l->keys[i]);
		parts[i] = l->hashcodes[i] % MEMORY_PARTITIONS;
	}
	qsort(parts, n, sizeof(int), compare_int);
	l->npartitions = 0;
	for (int i = 0; i < n; i++)
		if (i == 0 || parts[i] != parts[i - 1])
			l->partitions[l->npartitions++] = parts[i];
}

static void
lock_partitions(const Lookup *l, LWLockMode mode)
{
	for (int p = 0; p < l->npartitions; p++)
		LWLockAcquire(&shared->partition_locks[l->partitions[p]].lock, mode);
}

static void
unlock_partitions(const Lookup *l)
{
	for (int p = l->npartitions - 1; p >= 0; p--)
		LWLockRelease(&shared->partition_locks[l->partitions[p]].lock);
}

/* Can this kind of request be decided in memory at all? */
static bool
memory_kind(PklimitOpKind kind)
{
	return kind == PKLIMIT_OP_HIT || kind == PKLIMIT_OP_LIMIT ||
		kind == PKLIMIT_OP_PEEK || kind == PKLIMIT_OP_COUNT ||
		kind == PKLIMIT_OP_DECREMENT;
}

/*
 * Decide the n requests of one call on the entries found, at now, and
 * answer them.  Partition locks held exclusively.
 */
static void
decide_entries(const PklimitRequest *requests, PklimitAnswer *answers, int n,
			   MemoryEntry **found, TimestampTz now)
{
	PklimitResult results[PKLIMIT_GROUP_MAX];
	PklimitRow	before[PKLIMIT_GROUP_MAX];

	for (int i = 0; i < n; i++)
		before[i] = found[i]->row;
	if (n > 1 && requests[0].kind == PKLIMIT_OP_LIMIT)
	{
		PklimitRow	rows[PKLIMIT_GROUP_MAX];
		PklimitCall calls[PKLIMIT_GROUP_MAX];

		for (int i = 0; i < n; i++)
		{
			rows[i] = found[i]->row;
			calls[i] = requests[i].call;
		}
		pklimit_decide_group(rows, calls, n, now, results);
		for (int i = 0; i < n; i++)
			found[i]->row = rows[i];
	}
	else
		for (int i = 0; i < n; i++)
		{
			MemoryEntry *e = found[i];

			switch (requests[i].kind)
			{
				case PKLIMIT_OP_HIT:
				case PKLIMIT_OP_LIMIT:
					pklimit_decide_call(&e->row, &requests[i].call, now,
										&results[i]);
					break;
				case PKLIMIT_OP_PEEK:
					pklimit_decide_peek(&e->row, &requests[i].call, now,
										&results[i]);
					break;
				case PKLIMIT_OP_COUNT:
					memset(&results[i], 0, sizeof(PklimitResult));
					results[i].found = pklimit_state_count(&e->row, now,
														   &results[i].count);
					break;
				case PKLIMIT_OP_DECREMENT:
					pklimit_decide_decrement(&e->row, requests[i].call.cost,
											 now, &results[i]);
					break;
				default:
					/* memory_kind() let no other kind in */
					break;
			}
		}
	for (int i = 0; i < n; i++)
	{
		if (pklimit_rows_differ(&before[i], &found[i]->row))
			found[i]->changes++;
		/* pklimit_count only looks: a monitor keeps no key in memory */
		if (requests[i].kind != PKLIMIT_OP_COUNT)
			found[i]->last_used = used_now();
		memset(&answers[i], 0, sizeof(PklimitAnswer));
		answers[i].status = PKLIMIT_OK;
		answers[i].result = results[i];
	}
}

/*
 * The requests of one call (one key, or the keys of one group) looked up,
 * and decided if decide and every key is in memory, current and not on its
 * way out, and (for a call that changes a state) flushed enough.  Returns
 * MEMORY_DECIDED with the answers set, MEMORY_PRESENT if some key is there
 * but the call was not decided, MEMORY_ABSENT if none is.
 */
PklimitMemoryOutcome
pklimit_memory_find(const PklimitRequest *requests, PklimitAnswer *answers,
					int n, bool decide)
{
	Lookup		l;
	bool		all = true;
	bool		any = false;
	bool		changes = false;
	PklimitMemoryOutcome outcome;

	if (!memory_on() || n > PKLIMIT_GROUP_MAX)
		return PKLIMIT_MEMORY_ABSENT;
	for (int i = 0; i < n; i++)
	{
		if (!memory_kind(requests[i].kind))
			decide = false;
		changes |= (requests[i].kind != PKLIMIT_OP_COUNT &&
					requests[i].kind != PKLIMIT_OP_PEEK);
	}
	lookup_keys(requests, n, &l);
	lock_partitions(&l, decide ? LW_EXCLUSIVE : LW_SHARED);
	for (int i = 0; i < n; i++)
	{
		MemoryEntry *e = hash_search_with_hash_value(entries, &l.keys[i],
													 l.hashcodes[i],
													 HASH_FIND, NULL);

		if (e != NULL && !entry_current(e))
			e = NULL;			/* of a dropped extension: gone */
		l.found[i] = e;
		any |= (e != NULL);
		all &= (e != NULL && !e->leaving);
	}
	outcome = any ? PKLIMIT_MEMORY_PRESENT : PKLIMIT_MEMORY_ABSENT;
	if (decide && all)
	{
		/* read under the entries' locks: no state runs backwards */
		TimestampTz now = GetCurrentTimestamp();
		bool		flushed = true;

		for (int i = 0; i < n && changes; i++)
			flushed &= entry_flushed_enough(l.found[i], now);
		if (flushed)
		{
			decide_entries(requests, answers, n, l.found, now);
			outcome = PKLIMIT_MEMORY_DECIDED;
		}
	}
	unlock_partitions(&l);
	return outcome;
}

/*
 * The memory path of a call in the calling backend: decided in memory if
 * its keys are all there (and may be used); false if it must go to the
 * worker.
 */
bool
pklimit_memory_decide(const PklimitRequest *requests, PklimitAnswer *answers,
					  int n)
{
	return pklimit_memory_find(requests, answers, n, true) ==
		PKLIMIT_MEMORY_DECIDED;
}

/* This database's entry in databases[], claimed for it; -1 if none free. */
static int
my_database(void)
{
	int			d;

	LWLockAcquire(shared->control_lock, LW_EXCLUSIVE);
	d = claim_database(MyDatabaseId);
	LWLockRelease(shared->control_lock);
	return d;
}

/* The worker of this database starts serving it. */
void
pklimit_memory_attach(void)
{
	int			d;

	if (!memory_on())
		return;
	LWLockAcquire(shared->control_lock, LW_EXCLUSIVE);
	d = claim_database(MyDatabaseId);
	if (d >= 0)
		shared->databases[d].worker = true;
	LWLockRelease(shared->control_lock);
}

/*
 * Close this database's memory: from now on no call is decided on its
 * entries until a flush opens it again.  Every partition lock is taken and
 * released after, so no call that saw it open is still deciding.
 */
void
pklimit_memory_close(void)
{
	int			d;

	if (!memory_on())
		return;
	d = this_database();
	if (d < 0)
		return;
	pg_atomic_write_u64(&shared->databases[d].flushed_through, 0);
	for (int p = 0; p < MEMORY_PARTITIONS; p++)
	{
		LWLockAcquire(&shared->partition_locks[p].lock, LW_EXCLUSIVE);
		LWLockRelease(&shared->partition_locks[p].lock);
	}
}

/* The worker leaves: its database's entries stay for its successor. */
void
pklimit_memory_detach(void)
{
	int			d;

	if (!memory_on())
		return;
	LWLockAcquire(shared->control_lock, LW_EXCLUSIVE);
	d = database_index(MyDatabaseId);
	if (d >= 0)
	{
		shared->databases[d].worker = false;
		release_database_if_unused(d);
	}
	LWLockRelease(shared->control_lock);
}

/* Every change before through is in a committed flush. */
void
pklimit_memory_flushed_through(TimestampTz through)
{
	int			d;

	if (!memory_on())
		return;
	d = this_database();
	if (d >= 0)
		pg_atomic_write_u64(&shared->databases[d].flushed_through,
							(uint64) through);
}

/* The generation of this database's entries, for those read in from now. */
uint32
pklimit_memory_generation(void)
{
	int			d;

	if (!memory_on())
		return 0;
	d = my_database();
	return d < 0 ? 0 : pg_atomic_read_u32(&shared->databases[d].generation);
}

/*
 * After DROP EXTENSION pklimit committed: this database's entries are of a
 * table that is gone; the worker discards them.
 */
void
pklimit_memory_drop_extension(void)
{
	int			d;

	if (!memory_on())
		return;
	d = this_database();
	if (d >= 0)
		pg_atomic_fetch_add_u32(&shared->databases[d].generation, 1);
}

/*
 * Take slot s's entry out of the table.  Control lock and its partition
 * lock held exclusively.
 */
static void
remove_entry(int s)
{
	MemorySlot *slot = &slots[s];
	MemoryEntry *e = slot->entry;
	int			d = e->db;

	(void) hash_search_with_hash_value(entries, &e->key, slot->hashcode,
									   HASH_REMOVE, NULL);
	slot->entry = NULL;
	slot->dboid = InvalidOid;
	free_slots[shared->nfree++] = s;
	shared->databases[d].held--;
	release_database_if_unused(d);
}

/*
 * An entry that may be given back: not on its way out, and written, or of a
 * dropped extension (whose changes have no table to go to).
 */
static bool
entry_evictable(const MemoryEntry *e)
{
	return !e->leaving && (e->changes == e->written || !entry_current(e));
}

typedef struct Candidate
{
	int			slot;
	uint64		last_used;
} Candidate;

static int
compare_candidates(const void *a, const void *b)
{
	const Candidate *x = a;
	const Candidate *y = b;

	return x->last_used < y->last_used ? -1 : x->last_used > y->last_used;
}

/*
 * Give back entries, least recently used first, so database d may take one:
 * of its own, or of databases past their share.  Returns how many.
 */
static int
give_back_entries(int d)
{
	Candidate  *candidates = palloc(sizeof(Candidate) * pklimit_memory_keys);
	int			ncandidates = 0;
	int			evict;
	int			evicted = 0;

	LWLockAcquire(shared->control_lock, LW_EXCLUSIVE);
	for (int s = 0; s < pklimit_memory_keys; s++)
	{
		MemorySlot *slot = &slots[s];
		LWLock	   *lock;

		if (slot->entry == NULL)
			continue;
		lock = partition_lock(slot->hashcode);
		LWLockAcquire(lock, LW_SHARED);
		if (slot->entry != NULL &&
			(slot->entry->db == d || past_share(slot->entry->db)) &&
			entry_evictable(slot->entry))
		{
			candidates[ncandidates].slot = s;
			candidates[ncandidates++].last_used = slot->entry->last_used;
		}
		LWLockRelease(lock);
	}
	qsort(candidates, ncandidates, sizeof(Candidate), compare_candidates);
	evict = Min(ncandidates,
				Max(1, pklimit_memory_keys * MEMORY_EVICT_PERCENT / 100));
	for (int c = 0; c < evict; c++)
	{
		MemorySlot *slot = &slots[candidates[c].slot];
		LWLock	   *lock = partition_lock(slot->hashcode);

		LWLockAcquire(lock, LW_EXCLUSIVE);
		if (slot->entry != NULL && entry_evictable(slot->entry) &&
			(slot->entry->db == d || past_share(slot->entry->db)))
		{
			remove_entry(candidates[c].slot);
			evicted++;
		}
		LWLockRelease(lock);
	}
	LWLockRelease(shared->control_lock);
	pfree(candidates);
	return evicted;
}

/*
 * Put stored key (of this database, schema nspid, table relid) in memory
 * with the state row, as committed by the worker under generation.  Returns
 * 1 if it was put in, 0 if it was there already, -1 if no entry could be
 * had.
 */
int
pklimit_memory_read_in(const char *stored_key, Oid nspid, Oid relid,
					   uint32 generation, const PklimitRow *row)
{
	MemoryKey	key;
	uint32		hashcode;
	LWLock	   *lock;

	if (!memory_on())
		return -1;
	memset(&key, 0, sizeof(key));
	key.dboid = MyDatabaseId;
	key.nspid = nspid;
	strlcpy(key.key, stored_key, sizeof(key.key));
	hashcode = get_hash_value(entries, &key);
	lock = partition_lock(hashcode);

	for (int attempt = 0; attempt < 2; attempt++)
	{
		MemoryEntry *e;
		bool		found;
		int			d;
		int			evicted;

		LWLockAcquire(shared->control_lock, LW_EXCLUSIVE);
		d = claim_database(MyDatabaseId);
		if (d < 0)
		{
			LWLockRelease(shared->control_lock);
			return -1;
		}
		LWLockAcquire(lock, LW_EXCLUSIVE);
		e = hash_search_with_hash_value(entries, &key, hashcode, HASH_FIND,
										NULL);
		if (e != NULL && entry_current(e))
			found = true;		/* there already: only this worker puts its
								 * database's keys in */
		else if (e != NULL || may_take(d))
		{
			if (e == NULL)
			{
				/* a free slot means a free element: both number memory_keys */
				e = hash_search_with_hash_value(entries, &key, hashcode,
												HASH_ENTER_NULL, &found);
				if (e == NULL)
					elog(ERROR, "pklimit: no entry for a free memory slot");
				e->slot = free_slots[--shared->nfree];
				e->db = d;
				slots[e->slot].entry = e;
				slots[e->slot].hashcode = hashcode;
				slots[e->slot].dboid = MyDatabaseId;
				shared->databases[d].held++;
			}
			/* new, or replacing in its slot one of a dropped extension */
			e->generation = generation;
			e->relid = relid;
			e->leaving = false;
			e->row = *row;
			e->changes = e->written = 0;
			e->last_used = used_now();
			found = false;
		}
		else
			e = NULL;
		LWLockRelease(lock);
		LWLockRelease(shared->control_lock);
		if (e != NULL)
			return found ? 0 : 1;
		if (attempt > 0 || (evicted = give_back_entries(d)) == 0)
			return -1;
		pklimit_stats_add(PKLIMIT_STAT_MEMORY_EVICTIONS, evicted);
	}
	return -1;
}

/*
 * The changed entries of this database, copied for a flush (flush.c):
 * those still current, changed since their last flush, with a row.  Stale
 * entries (of a dropped extension) are discarded, those of another table
 * than relid written by nothing.  With leaving, only the keys of requests[]
 * (of n) are copied, and marked on their way out, changed or not.  Returns
 * how many were copied into *copies (palloc'd).
 */
int
pklimit_memory_collect(PklimitMemoryCopy **copies, Oid relid,
					   const PklimitRequest *requests, int n)
{
	PklimitMemoryCopy *c;
	int			ncopies = 0;

	*copies = NULL;
	if (!memory_on())
		return 0;
	if (requests != NULL)
	{
		c = palloc(sizeof(PklimitMemoryCopy) * n);
		for (int i = 0; i < n; i++)
		{
			Lookup		l;
			MemoryEntry *e;

			lookup_keys(&requests[i], 1, &l);
			lock_partitions(&l, LW_EXCLUSIVE);
			e = hash_search_with_hash_value(entries, &l.keys[0], l.hashcodes[0],
											HASH_FIND, NULL);
			if (e != NULL && !e->leaving)
			{
				e->leaving = true;
				c[ncopies].slot = e->slot;
				c[ncopies].entry = e;
				strlcpy(c[ncopies].key, e->key.key, sizeof(c[ncopies].key));
				c[ncopies].row = e->row;
				c[ncopies].changes = e->changes;
				c[ncopies].write = entry_current(e) && e->relid == relid &&
					e->changes != e->written && e->row.exists;
				ncopies++;
			}
			unlock_partitions(&l);
		}
		*copies = c;
		return ncopies;
	}

	c = palloc(sizeof(PklimitMemoryCopy) * 64);
	for (int s = 0, size = 64; s < pklimit_memory_keys; s++)
	{
		MemorySlot *slot = &slots[s];
		LWLock	   *lock;
		MemoryEntry *e;
		bool		stale = false;

		if (slot->dboid != MyDatabaseId)
			continue;
		if (ncopies == size)
		{
			size *= 2;
			c = repalloc(c, sizeof(PklimitMemoryCopy) * size);
		}
		lock = partition_lock(slot->hashcode);
		LWLockAcquire(lock, LW_SHARED);
		e = slot->entry;
		if (e != NULL && slot->dboid == MyDatabaseId && !e->leaving)
		{
			stale = !entry_current(e) || e->relid != relid;
			if (!stale && e->changes != e->written && e->row.exists)
			{
				c[ncopies].slot = s;
				c[ncopies].entry = e;
				strlcpy(c[ncopies].key, e->key.key, sizeof(c[ncopies].key));
				c[ncopies].row = e->row;
				c[ncopies].changes = e->changes;
				c[ncopies].write = true;
				ncopies++;
			}
		}
		LWLockRelease(lock);
		if (stale)
		{
			LWLockAcquire(shared->control_lock, LW_EXCLUSIVE);
			LWLockAcquire(lock, LW_EXCLUSIVE);
			if (slot->entry == e && e != NULL && !e->leaving &&
				(!entry_current(e) || e->relid != relid))
				remove_entry(s);
			LWLockRelease(lock);
			LWLockRelease(shared->control_lock);
		}
	}
	*copies = c;
	return ncopies;
}

/* After the flush of copies committed: their changes are written. */
void
pklimit_memory_written(const PklimitMemoryCopy *copies, int n)
{
	for (int i = 0; i < n; i++)
	{
		MemorySlot *slot = &slots[copies[i].slot];
		LWLock	   *lock = partition_lock(slot->hashcode);

		MemoryEntry *e = copies[i].entry;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		if (slot->entry == e && copies[i].changes > e->written)
			e->written = copies[i].changes;
		LWLockRelease(lock);
	}
}

/*
 * The entries of copies (collected as leaving) come out of memory: their
 * state is committed in the table.  With stay, they stay instead, changed
 * by nothing meanwhile: that commit failed.
 */
void
pklimit_memory_leave(const PklimitMemoryCopy *copies, int n, bool stay)
{
	if (n == 0)
		return;
	LWLockAcquire(shared->control_lock, LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
	{
		MemorySlot *slot = &slots[copies[i].slot];
		LWLock	   *lock = partition_lock(slot->hashcode);

		LWLockAcquire(lock, LW_EXCLUSIVE);
		if (slot->entry == copies[i].entry)
		{
			if (stay)
				((MemoryEntry *) copies[i].entry)->leaving = false;
			else
				remove_entry(copies[i].slot);
		}
		LWLockRelease(lock);
	}
	LWLockRelease(shared->control_lock);
}

/*
 * After an exit cut a take-out short (a termination inside its
 * transaction): this database's entries on their way out stay, so the last
 * flush writes them.  Only this database's worker marks them.
 */
void
pklimit_memory_stay_all(void)
{
	if (!memory_on())
		return;
	for (int s = 0; s < pklimit_memory_keys; s++)
	{
		MemorySlot *slot = &slots[s];
		LWLock	   *lock;

		if (slot->dboid != MyDatabaseId)
			continue;
		lock = partition_lock(slot->hashcode);
		LWLockAcquire(lock, LW_EXCLUSIVE);
		if (slot->entry != NULL && slot->dboid == MyDatabaseId)
			slot->entry->leaving = false;
		LWLockRelease(lock);
	}
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
	d = this_database();
	if (d < 0)
		return false;
	through = pg_atomic_read_u64(&shared->databases[d].flushed_through);
	return through != 0 && !lag_within_bound(through, GetCurrentTimestamp());
}

/* Does this database hold entries? */
bool
pklimit_memory_held(void)
{
	int			d;
	bool		held;

	if (!memory_on())
		return false;
	LWLockAcquire(shared->control_lock, LW_SHARED);
	d = database_index(MyDatabaseId);
	held = d >= 0 && shared->databases[d].held > 0;
	LWLockRelease(shared->control_lock);
	return held;
}

/*
 * Give back entries of this database past its share while other served
 * databases' shares are short of free entries; returns how many.
 */
int
pklimit_memory_shed(void)
{
	int			d;
	bool		shed;

	if (!memory_on())
		return 0;
	LWLockAcquire(shared->control_lock, LW_SHARED);
	d = database_index(MyDatabaseId);
	shed = d >= 0 && pklimit_share_owed(memory_share(),
										shared->databases[d].held,
										shared->nfree, others_unused(d));
	LWLockRelease(shared->control_lock);
	return shed ? give_back_entries(d) : 0;
}

/*
 * DROP DATABASE dboid: its entries go, unwritten.  No worker serves it any
 * more.
 */
void
pklimit_memory_forget_database(Oid dboid)
{
	if (!memory_on())
		return;
	LWLockAcquire(shared->control_lock, LW_EXCLUSIVE);
	for (int s = 0; s < pklimit_memory_keys; s++)
	{
		MemorySlot *slot = &slots[s];
		LWLock	   *lock;

		if (slot->dboid != dboid)
			continue;
		lock = partition_lock(slot->hashcode);
		LWLockAcquire(lock, LW_EXCLUSIVE);
		if (slot->entry != NULL && slot->dboid == dboid)
			remove_entry(s);
		LWLockRelease(lock);
	}
	{
		int			d = database_index(dboid);

		if (d >= 0)
		{
			shared->databases[d].worker = false;
			release_database_if_unused(d);
		}
	}
	LWLockRelease(shared->control_lock);
}

/*
 * What pklimit_stats shows of database dboid's memory: the entries it holds
 * and its flush lag in milliseconds (-1: none, or closed).
 */
void
pklimit_memory_database_stats(Oid dboid, int64 *held, double *lag_ms)
{
	int			d;

	*held = 0;
	*lag_ms = -1;
	if (!memory_on())
		return;
	LWLockAcquire(shared->control_lock, LW_SHARED);
	d = database_index(dboid);
	if (d >= 0)
	{
		uint64		through = pg_atomic_read_u64(&shared->databases[d].flushed_through);

		*held = shared->databases[d].held;
		/* a clock stepped back shows as lag, as lag_within_bound counts it */
		if (through != 0)
		{
			int64		lag = GetCurrentTimestamp() - (TimestampTz) through;

			*lag_ms = (double) (lag < 0 ? -lag : lag) / 1000.0;
		}
	}
	LWLockRelease(shared->control_lock);
}
