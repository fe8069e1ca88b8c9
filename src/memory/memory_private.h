/*-------------------------------------------------------------------------
 *
 * memory_private.h
 *		The memory path's own types, shared state and locks, for the files
 *		of src/memory/ only: keys.c (the table and a caller's decision),
 *		databases.c (each database's keys: share, lifecycle, eviction),
 *		inout.c (keys as the worker reads them in, collects them for a write
 *		and takes them out), readin.c (which keys come in, and the read of
 *		missed keys), flush.c (the flush) and batch.c (the batch's seam).
 *		The rest of pklimit sees memory.h.
 *
 * Locking: the table is split into MEMORY_PARTITIONS partitions by the hash
 * of the key, each with an LWLock (tranche pklimit_memory) that protects
 * its keys and the directory items that point at them, taken exclusively
 * to change either (a call decided, a key put in or taken out) and shared
 * to read.  The control lock (tranche pklimit_memory_control) protects the
 * free items, each database's dboid, held count and worker flag (but its
 * flushed_through and generation, atomics read under a partition lock).  A
 * call on several keys takes their partitions' locks in ascending order.
 * Order: pklimit_lock, then the control lock, then partition locks in
 * ascending order.  No lock is held across I/O, a transaction or a wait,
 * and nothing that can raise an error (statistics included: claiming a
 * database's counters takes pklimit_lock) runs under one.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_MEMORY_PRIVATE_H
#define PKLIMIT_MEMORY_PRIVATE_H

#include "port/atomics.h"
#include "storage/lwlock.h"
#include "utils/dsa.h"
#include "utils/hsearch.h"

#include "memory.h"
#include "settings.h"

/* Partitions of the table, each with its lock (a power of 2). */
#define MEMORY_PARTITIONS 128

/* Databases that can hold keys at once. */
#define MEMORY_DATABASES 64

/*
 * Bytes of the keys' area per key in memory, on average.  A key's bytes
 * take the smallest of the area's sizes that holds them (8, 16, 24, ...,
 * 64, 80, 96, ...): a key of 40 bytes takes 40.
 */
#define MEMORY_KEY_AREA_BYTES 64

/*
 * What names a key in memory: its database, its schema and its stored
 * key's bytes (without a terminating NUL).  A key's bytes are kept in the
 * keys' area (a DSA area in pklimit's shared memory, keys.c), so that a key
 * takes its length and not the longest a stored key can have; a tag that
 * only looks a key up points at its caller's bytes instead.
 */
typedef struct MemoryTag
{
	Oid			dboid;
	Oid			nspid;
	uint16		len;
	bool		in_area;		/* bytes.area; false: bytes.caller */
	union
	{
		const char *caller;
		dsa_pointer area;
	}			bytes;
} MemoryTag;

/*
 * One key's state in memory.  Protected by its partition's lock.  (The
 * fields by size: a server keeps many.)
 */
typedef struct MemoryKey
{
	MemoryTag	tag;			/* the hash key: first */
	PklimitRow	row;			/* the key's state */
	uint64		last_used;		/* the use clock when last used */
	uint32		changes;		/* changes made to it since read in (only
								 * compared with written for equality) */
	uint32		written;		/* of them, in a committed flush */
	uint32		generation;		/* of its database when read in */
	Oid			relid;			/* the table it was read from */
	int			item;			/* its directory item */
	int16		db;				/* its database in databases[] */
	bool		leaving;		/* the worker takes it out: calls on it take
								 * the durable path */
	uint8		uses;			/* calls on it since read in, the call that
								 * read it in counted, up to 2: 1 is a key
								 * used once (admission, readin.c) */
	bool		synced;			/* its row existed when last read or written */
	TransactionId synced_xmin;	/* that row version's xmin (the flush on Citus
								 * writes only over it: flush.c) */
} MemoryKey;

/*
 * The place a key read in may take (the admission rule's answer, readin.c):
 * none (it stays out), a free one only (the admission gave back a key used
 * once for it), or a free one or that of the least recently used.
 */
typedef enum MemoryPlace
{
	MEMORY_PLACE_NONE,
	MEMORY_PLACE_FREE,
	MEMORY_PLACE_ANY
} MemoryPlace;

/*
 * A directory item: one key in memory, so the worker finds its database's
 * keys without walking the hash table.  Changed under the control lock and
 * the partition lock of hashcode, both exclusive; read under that
 * partition lock (a reader takes hashcode first, then checks the item
 * again under its lock).
 */
typedef struct DirectoryItem
{
	MemoryKey  *key;			/* NULL: free */
	uint32		hashcode;
	Oid			dboid;
} DirectoryItem;

/* A database's part of the table: databases[d], found by its dboid. */
typedef struct MemoryDatabase
{
	Oid			dboid;			/* InvalidOid: unused; control lock */
	int			held;			/* keys it holds; control lock */
	bool		worker;			/* a worker serves it; control lock */
	pg_atomic_uint32 generation;	/* keys of another are not its keys any
									 * more (DROP EXTENSION) */
	pg_atomic_uint64 flushed_through;	/* every change before this moment is
										 * in a committed flush; 0: closed */
} MemoryDatabase;

typedef struct MemoryShared
{
	LWLockPadded *partition_locks;
	LWLock	   *control_lock;
	int			nfree;			/* free items, at free_items[0 .. nfree-1] */
	pg_atomic_uint64 use_clock; /* ticks once per use of a key: the order of
								 * uses, which no two share (the wall clock's
								 * microseconds can, and can step back) */
	int			area_tranche;	/* the keys' area's locks */
	void	   *area_place;		/* where the keys' area is */
	MemoryDatabase databases[MEMORY_DATABASES];
} MemoryShared;

/* Set up by keys.c at shared memory startup; NULL without the memory path. */
extern MemoryShared *pklimit_memory_shared;
extern HTAB *pklimit_memory_table;
extern DirectoryItem *pklimit_memory_directory; /* pklimit_memory_keys */
extern int *pklimit_memory_free_items;	/* pklimit_memory_keys */

/* Is the memory path there at all (preloaded, with keys)? */
static inline bool
memory_on(void)
{
	return pklimit_memory_shared != NULL && pklimit_memory_table != NULL;
}

static inline MemoryDatabase *
database_at(int d)
{
	return &pklimit_memory_shared->databases[d];
}

static inline LWLock *
control_lock(void)
{
	return pklimit_memory_shared->control_lock;
}

static inline LWLock *
partition_lock(uint32 hashcode)
{
	return &pklimit_memory_shared->partition_locks[hashcode % MEMORY_PARTITIONS].lock;
}

/* The use clock's next tick, for a key used now (under its lock). */
static inline uint64
used_now(void)
{
	return pg_atomic_fetch_add_u64(&pklimit_memory_shared->use_clock, 1);
}

/*
 * Is the state of key k the truth of its key now: read in under its
 * database's generation?  Partition lock held.
 */
static inline bool
key_current(const MemoryKey *k)
{
	return k->generation ==
		pg_atomic_read_u32(&database_at(k->db)->generation);
}

/*
 * Is memory open (through not 0) and the flush lag from through to now
 * within twice pklimit.flush_interval?  A clock stepped back counts as far
 * as one stepped on: until the worker's next flush sets through by the new
 * clock, nothing else says the flush still runs.
 */
static inline bool
lag_within_bound(uint64 through, TimestampTz now)
{
	int64		bound = (int64) 2 * pklimit_flush_interval * 1000;

	return through != 0 &&
		now - (TimestampTz) through <= bound &&
		(TimestampTz) through - now <= bound;
}

/* Can this kind of request be decided in memory at all? */
static inline bool
pklimit_memory_kind(PklimitOpKind kind)
{
	return kind == PKLIMIT_OP_HIT || kind == PKLIMIT_OP_LIMIT ||
		kind == PKLIMIT_OP_PEEK || kind == PKLIMIT_OP_COUNT ||
		kind == PKLIMIT_OP_DECREMENT;
}

/* keys.c: the keys' area, attached in this process, and a tag's bytes */
extern dsa_area *pklimit_memory_area(void);

static inline const char *
memory_tag_bytes(const MemoryTag *t)
{
	return t->in_area ?
		(const char *) dsa_get_address(pklimit_memory_area(), t->bytes.area) :
		t->bytes.caller;
}

/* A tag that looks stored_key up: its bytes are the caller's. */
static inline void
memory_tag_of(MemoryTag *t, Oid dboid, Oid nspid, const char *stored_key)
{
	t->dboid = dboid;
	t->nspid = nspid;
	t->len = (uint16) strlen(stored_key);
	t->in_area = false;
	t->bytes.caller = stored_key;
}

/* The keys of n requests, their hash codes, and the partitions to lock. */
typedef struct MemoryLookup
{
	MemoryTag	tags[PKLIMIT_GROUP_MAX];
	uint32		hashcodes[PKLIMIT_GROUP_MAX];
	int			partitions[PKLIMIT_GROUP_MAX];	/* ascending, each once */
	int			npartitions;
	MemoryKey  *found[PKLIMIT_GROUP_MAX];
} MemoryLookup;

/* What became of a call looked up in memory. */
typedef enum MemoryOutcome
{
	MEMORY_ABSENT,				/* no key of the call is in memory */
	MEMORY_PRESENT,				/* some are, but it was not decided there */
	MEMORY_DECIDED				/* decided in memory, answered */
} MemoryOutcome;

/* One key's state copied for a write to the table (inout.c, flush.c). */
typedef struct MemoryCopy
{
	int			item;			/* its directory item */
	MemoryKey  *key;			/* the key, to find it unchanged */
	uint64		changes;		/* its changes when copied */
	bool		write;			/* to be written (current, changed) */
	bool		synced;			/* the key's synced and synced_xmin; after a
								 * write, the version written */
	TransactionId synced_xmin;
	char		stored_key[PKLIMIT_MAX_READABLE_KEY + 1];
	PklimitRow	row;
} MemoryCopy;

/* keys.c */
extern void pklimit_memory_lookup(const PklimitRequest *requests, int n,
								  MemoryLookup *l);
extern void pklimit_memory_lock(const MemoryLookup *l, LWLockMode mode);
extern void pklimit_memory_unlock(const MemoryLookup *l);
extern MemoryOutcome pklimit_memory_find(const PklimitRequest *requests,
										 PklimitAnswer *answers, int n,
										 bool decide, bool read_in);

/* databases.c */
extern int	pklimit_memory_database_index(Oid dboid);
extern int	pklimit_memory_this_database(void);
extern int	pklimit_memory_claim_database(Oid dboid);
extern bool pklimit_memory_may_take(int d);
extern int	pklimit_memory_give_back(int d);
extern bool pklimit_memory_give_back_one_off(void);
extern void pklimit_memory_remove(int item);
extern void pklimit_memory_flushed_through(TimestampTz through);
extern uint32 pklimit_memory_generation(void);
extern bool pklimit_memory_held(void);
extern bool pklimit_memory_room(void);
extern bool pklimit_memory_lagging(void);
extern void pklimit_memory_shed(void);

/* inout.c */
extern int	pklimit_memory_read_in(const char *stored_key, Oid nspid,
								   Oid relid, uint32 generation,
								   const PklimitRow *row, bool used,
								   MemoryPlace place);
extern int	pklimit_memory_collect(MemoryCopy **copies, Oid relid,
								   const PklimitRequest *requests, int n,
								   bool all);
extern void pklimit_memory_written(const MemoryCopy *copies, int n);
extern void pklimit_memory_drop(const MemoryCopy *copies, const bool *dropped,
								int n);
extern void pklimit_memory_leave(const MemoryCopy *copies, int n, bool stay);

/* readin.c */
extern MemoryPlace pklimit_memory_admitted(const char *stored_key,
										   Oid nspid, bool track_stats);
extern int	pklimit_memory_admit(const char *stored_key, Oid nspid, Oid relid,
								 uint32 generation, const PklimitRow *row,
								 bool track_stats);
extern bool pklimit_memory_read_rows(PklimitSession *session,
									 MemoryContext memory_context,
									 const char *const *keys, int n,
									 PklimitRow *rows, Oid *relid,
									 uint32 *generation);

/* flush.c */
extern bool pklimit_memory_write_out(PklimitSession *session,
									 MemoryContext memory_context,
									 const PklimitRequest *requests, int n,
									 ErrorData **error, int *nwritten);

#endif							/* PKLIMIT_MEMORY_PRIVATE_H */
