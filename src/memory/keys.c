/*-------------------------------------------------------------------------
 *
 * keys.c
 *		The memory path's table in shared memory (docs/memory.md): keys'
 *		states in a partitioned hash table, with a directory of the keys in
 *		use that the worker walks; set up at server start; and a call
 *		decided on them, in the calling backend (durable => false, and
 *		pklimit_count) or by the worker for the requests it finds there,
 *		and counted.  What a call decides is limit.c's.  Nothing here puts
 *		keys in or takes them out (inout.c, databases.c), and nothing here
 *		touches pklimit's table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "memory_private.h"
#include "stats.h"

MemoryShared *pklimit_memory_shared = NULL;
HTAB	   *pklimit_memory_table = NULL;
DirectoryItem *pklimit_memory_directory = NULL;
int		   *pklimit_memory_free_items = NULL;

/* The keys' area, attached in this process. */
static dsa_area *key_area = NULL;

static uint32
memory_tag_hash(const void *key, Size keysize)
{
	const MemoryTag *t = key;
	uint32		h = hash_bytes((const unsigned char *) memory_tag_bytes(t),
							   t->len);

	h = hash_combine(h, hash_bytes_uint32(t->dboid));
	return hash_combine(h, hash_bytes_uint32(t->nspid));
}

static int
memory_tag_match(const void *a, const void *b, Size keysize)
{
	const MemoryTag *x = a;
	const MemoryTag *y = b;

	if (x->dboid != y->dboid || x->nspid != y->nspid || x->len != y->len)
		return 1;
	return memcmp(memory_tag_bytes(x), memory_tag_bytes(y), x->len);
}

/*
 * The keys' area's size: MEMORY_KEY_AREA_BYTES a key, and its own needs: a
 * DSA area hands out each size of its objects from blocks of 64 kB of its
 * own (DSA_SUPERBLOCK_SIZE, private to dsa.c), and a stored key has one of
 * 17 sizes (8 to 256 bytes, and the area's bookkeeping), each of which may
 * hold a block only partly used.
 */
#define KEY_AREA_BLOCK (64 * 1024)
#define KEY_AREA_SIZES 17

static Size
key_area_size(void)
{
	return add_size(add_size(mul_size(pklimit_memory_keys, MEMORY_KEY_AREA_BYTES),
							 mul_size(KEY_AREA_SIZES, KEY_AREA_BLOCK)),
					dsa_minimum_size());
}

/*
 * The keys' area, attached in this process on first use (the postmaster
 * created it, as part of shared memory) and released at its exit.
 */
dsa_area *
pklimit_memory_area(void)
{
	if (key_area == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		LWLockRegisterTranche(pklimit_memory_shared->area_tranche,
							  "pklimit_memory_keys");
		key_area = dsa_attach_in_place(pklimit_memory_shared->area_place, NULL);
		on_shmem_exit(dsa_on_shmem_exit_release_in_place,
					  PointerGetDatum(pklimit_memory_shared->area_place));
		MemoryContextSwitchTo(old);
	}
	return key_area;
}

Size
pklimit_memory_shmem_size(void)
{
	Size		size = MAXALIGN(sizeof(MemoryShared));

	if (pklimit_memory_keys == 0)
		return size;
	size = add_size(size, hash_estimate_size(pklimit_memory_keys,
											 sizeof(MemoryKey)));
	size = add_size(size, mul_size(pklimit_memory_keys, sizeof(DirectoryItem)));
	size = add_size(size, mul_size(pklimit_memory_keys, sizeof(int)));
	return add_size(size, key_area_size());
}

void
pklimit_memory_shmem_request(void)
{
	RequestNamedLWLockTranche("pklimit_memory", MEMORY_PARTITIONS);
	RequestNamedLWLockTranche("pklimit_memory_control", 1);
}

/* The shared part: the locks, the use clock and the databases. */
static void
init_shared(void)
{
	bool		found;
	MemoryShared *shared;

	shared = ShmemInitStruct("pklimit memory", sizeof(MemoryShared), &found);
	pklimit_memory_shared = shared;
	if (found)
		return;
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

/* At shared memory setup, with AddinShmemInitLock held. */
void
pklimit_memory_shmem_init(void)
{
	bool		found;
	HASHCTL		info;

	init_shared();
	if (pklimit_memory_keys == 0)
		return;
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(MemoryTag);
	info.entrysize = sizeof(MemoryKey);
	info.hash = memory_tag_hash;
	info.match = memory_tag_match;
	info.num_partitions = MEMORY_PARTITIONS;
	pklimit_memory_table = ShmemInitHash("pklimit memory keys",
										 pklimit_memory_keys,
										 pklimit_memory_keys, &info,
										 HASH_ELEM | HASH_FUNCTION |
										 HASH_COMPARE | HASH_PARTITION |
										 HASH_FIXED_SIZE);
	pklimit_memory_directory =
		ShmemInitStruct("pklimit memory directory",
						mul_size(pklimit_memory_keys, sizeof(DirectoryItem)),
						&found);
	pklimit_memory_free_items =
		ShmemInitStruct("pklimit memory free slots",
						mul_size(pklimit_memory_keys, sizeof(int)), &found);
	if (!found)
	{
		memset(pklimit_memory_directory, 0,
			   mul_size(pklimit_memory_keys, sizeof(DirectoryItem)));
		for (int i = 0; i < pklimit_memory_keys; i++)
			pklimit_memory_free_items[i] = pklimit_memory_keys - 1 - i;
		pklimit_memory_shared->nfree = pklimit_memory_keys;
	}
	pklimit_memory_shared->area_place =
		ShmemInitStruct("pklimit memory key area", key_area_size(), &found);
	if (!found)
	{
		dsa_area   *area;

		/*
		 * The area is created here, once, in a place of the main shared
		 * memory, never to grow into segments of its own; each process
		 * attaches to it (pklimit_memory_area), this one too.
		 */
		pklimit_memory_shared->area_tranche = LWLockNewTrancheId();
		area = dsa_create_in_place(pklimit_memory_shared->area_place,
								   key_area_size(),
								   pklimit_memory_shared->area_tranche, NULL);
		dsa_set_size_limit(area, key_area_size());
	}
}

/*
 * May calls be decided on key k now, so that the loss bound holds: its
 * database's flush lag is within the bound, and memory is not closed.
 * Partition lock held (so a close is seen).
 */
static bool
key_flushed_enough(const MemoryKey *k, TimestampTz now)
{
	return lag_within_bound(pg_atomic_read_u64(&database_at(k->db)->flushed_through),
							now);
}

static int
compare_int(const void *a, const void *b)
{
	return *(const int *) a - *(const int *) b;
}

/* The tags of n requests, their hash codes and the partitions to lock. */
void
pklimit_memory_lookup(const PklimitRequest *requests, int n, MemoryLookup *l)
{
	int			parts[PKLIMIT_GROUP_MAX];

	for (int i = 0; i < n; i++)
	{
		memory_tag_of(&l->tags[i], requests[i].dboid, requests[i].nspid,
					  requests[i].key);
		l->hashcodes[i] = get_hash_value(pklimit_memory_table, &l->tags[i]);
		parts[i] = l->hashcodes[i] % MEMORY_PARTITIONS;
	}
	qsort(parts, n, sizeof(int), compare_int);
	l->npartitions = 0;
	for (int i = 0; i < n; i++)
		if (i == 0 || parts[i] != parts[i - 1])
			l->partitions[l->npartitions++] = parts[i];
}

void
pklimit_memory_lock(const MemoryLookup *l, LWLockMode mode)
{
	for (int p = 0; p < l->npartitions; p++)
		LWLockAcquire(&pklimit_memory_shared->partition_locks[l->partitions[p]].lock,
					  mode);
}

void
pklimit_memory_unlock(const MemoryLookup *l)
{
	for (int p = l->npartitions - 1; p >= 0; p--)
		LWLockRelease(&pklimit_memory_shared->partition_locks[l->partitions[p]].lock);
}

/* Request r (of no group) decided on key k at now. */
static void
decide_one(const PklimitRequest *r, MemoryKey *k, TimestampTz now,
		   PklimitResult *result)
{
	switch (r->kind)
	{
		case PKLIMIT_OP_HIT:
		case PKLIMIT_OP_LIMIT:
			pklimit_decide_call(&k->row, &r->call, now, result);
			break;
		case PKLIMIT_OP_PEEK:
			pklimit_decide_peek(&k->row, &r->call, now, result);
			break;
		case PKLIMIT_OP_COUNT:
			memset(result, 0, sizeof(PklimitResult));
			result->found = pklimit_state_count(&k->row, now, &result->count);
			break;
		case PKLIMIT_OP_DECREMENT:
			pklimit_decide_decrement(&k->row, r->call.cost, now, result);
			break;
		default:
			/* pklimit_memory_kind() let no other kind in */
			break;
	}
}

/*
 * Decide the n requests of one call on the keys found, at now, and answer
 * them.  Partition locks held exclusively.
 */
static void
decide_keys(const PklimitRequest *requests, PklimitAnswer *answers, int n,
			MemoryKey **found, TimestampTz now)
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
			decide_one(&requests[i], found[i], now, &results[i]);
	for (int i = 0; i < n; i++)
	{
		if (pklimit_rows_differ(&before[i], &found[i]->row))
			found[i]->changes++;
		/* pklimit_count only looks: a monitor keeps no key in memory */
		if (requests[i].kind != PKLIMIT_OP_COUNT)
		{
			found[i]->last_used = used_now();
			found[i]->uses = Min(found[i]->uses + 1, 2);
		}
		memset(&answers[i], 0, sizeof(PklimitAnswer));
		answers[i].status = PKLIMIT_OK;
		answers[i].result = results[i];
	}
}

/*
 * A call decided in memory, counted as its caller's pklimit.track_stats
 * says: the events it recorded, and a memory call, a hit unless its key
 * was just read in for it (a miss, counted by batch.c).  Here only,
 * whoever decided it (the calling backend or the worker); after the
 * partition locks are released, as counting may take pklimit_lock.
 */
static void
count_decided(const PklimitRequest *requests, const PklimitAnswer *answers,
			  int n, bool read_in)
{
	uint64		events = 0;

	if (!requests[0].track_stats)
		return;
	for (int i = 0; i < n; i++)
	{
		uint64		recorded = (uint64) answers[i].result.recorded;

		events = (events > PG_UINT64_MAX - recorded) ? PG_UINT64_MAX :
			events + recorded;
	}
	pklimit_stats_add(PKLIMIT_STAT_EVENTS, events);
	if (requests[0].call.memory)
	{
		pklimit_stats_add(PKLIMIT_STAT_MEMORY_CALLS, 1);
		if (!read_in)
			pklimit_stats_add(PKLIMIT_STAT_MEMORY_HITS, 1);
	}
}

/*
 * The requests of one call (one key, or the keys of one group) looked up,
 * and decided if decide and every key is in memory, current and not on its
 * way out, and (for a call that changes a state) flushed enough.  Returns
 * MEMORY_DECIDED with the answers set (and counted: read_in, its key was
 * just read in for it), MEMORY_PRESENT if some key is there but the call
 * was not decided, MEMORY_ABSENT if none is.
 */
MemoryOutcome
pklimit_memory_find(const PklimitRequest *requests, PklimitAnswer *answers,
					int n, bool decide, bool read_in)
{
	MemoryLookup l;
	bool		all = true;
	bool		any = false;
	bool		changes = false;
	MemoryOutcome outcome;

	if (!memory_on() || n > PKLIMIT_GROUP_MAX)
		return MEMORY_ABSENT;
	for (int i = 0; i < n; i++)
	{
		if (!pklimit_memory_kind(requests[i].kind))
			decide = false;
		changes |= (requests[i].kind != PKLIMIT_OP_COUNT &&
					requests[i].kind != PKLIMIT_OP_PEEK);
	}
	pklimit_memory_lookup(requests, n, &l);
	pklimit_memory_lock(&l, decide ? LW_EXCLUSIVE : LW_SHARED);
	for (int i = 0; i < n; i++)
	{
		MemoryKey  *k = hash_search_with_hash_value(pklimit_memory_table,
													&l.tags[i],
													l.hashcodes[i],
													HASH_FIND, NULL);

		if (k != NULL && !key_current(k))
			k = NULL;			/* of a dropped extension: gone */
		l.found[i] = k;
		any |= (k != NULL);
		all &= (k != NULL && !k->leaving);
	}
	outcome = any ? MEMORY_PRESENT : MEMORY_ABSENT;
	if (decide && all)
	{
		/* read under the keys' locks: no state runs backwards */
		TimestampTz now = GetCurrentTimestamp();
		bool		flushed = true;

		for (int i = 0; i < n && changes; i++)
			flushed &= key_flushed_enough(l.found[i], now);
		if (flushed)
		{
			decide_keys(requests, answers, n, l.found, now);
			outcome = MEMORY_DECIDED;
		}
	}
	pklimit_memory_unlock(&l);
	if (outcome == MEMORY_DECIDED)
		count_decided(requests, answers, n, read_in);
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
	return pklimit_memory_find(requests, answers, n, true, false) ==
		MEMORY_DECIDED;
}
