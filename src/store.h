/*-------------------------------------------------------------------------
 *
 * store.h
 *		pklimit's table: found and checked for one transaction (table.c),
 *		and the statements on it (store.c), run in the current transaction
 *		as the current role.  Only the worker's transactions use them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_STORE_H
#define PKLIMIT_STORE_H

#include "limit.h"

/*
 * One shard of a table Citus distributes by key (citus.c): its hash range,
 * whether it is on this node and, then, whether this transaction holds it
 * here (locked against a move).
 */
typedef struct PklimitShard
{
	int64		id;
	int32		min;
	int32		max;
	bool		local;
	bool		locked;
	char		name[4 * NAMEDATALEN + 8];	/* schema-qualified, quoted */
} PklimitShard;

/* The shards of one distributed table, by ascending hash range. */
typedef struct PklimitShardMap
{
	Oid			relid;
	bool		stale;			/* Citus changed the table's metadata */
	Oid			collation;		/* of the key column, for its hash */
	int			nshards;
	PklimitShard *shards;
} PklimitShardMap;

/* pklimit's table, as one transaction found it (table.c). */
typedef struct PklimitTable
{
	Oid			nspid;
	Oid			relid;
	Oid			owner;			/* pklimit's statements run as this role */
	int			version;		/* 1: the table of 0.1.0; 2: of 0.2.0; 3: of
								 * 0.3.0 */
	bool		citus;			/* distributed or replicated by Citus */
	PklimitShardMap *shards;	/* distributed by key: its shards, those on
								 * this node locked for the transaction */
	bool		direct;			/* statements on a key whose shard is locked
								 * here run on the shard itself */
} PklimitTable;

/* table.c */
extern void pklimit_table_open(Oid nspid, bool on_citus, PklimitTable *table);
extern Oid	pklimit_table_leases(const PklimitTable *table, bool missing_ok);
extern bool pklimit_table_free(Oid nspid);
extern bool pklimit_table_oldest_end(Oid nspid, TimestampTz *oldest,
									 bool *found);

/* citus.c */
extern bool pklimit_shards_prepare(PklimitTable *table,
								   const char *const *keys, int n,
								   PklimitShard **usable);
extern PklimitShard *pklimit_shard_of(const PklimitShardMap *map,
									  const char *stored_key);
extern PklimitShard *pklimit_shard_usable(const PklimitTable *table,
										  const char *stored_key);
extern uint64 pklimit_shards_generation(void);
extern bool pklimit_key_on_this_node(const char *stored_key);

/* store.c */
extern void pklimit_store_hit(const PklimitTable *table, const char *stored_key,
							  const PklimitCall *starts, int64 max_count,
							  int64 events, TimestampTz now, PklimitRow *row);
extern bool pklimit_store_read(const PklimitTable *table, const char *stored_key,
							   bool lock, PklimitRow *row);
extern void pklimit_store_read_many(const PklimitTable *table,
									const char *const *keys, int n,
									PklimitRow *rows);
extern void pklimit_store_write(const PklimitTable *table,
								const char *stored_key, const PklimitRow *row,
								bool existed);
extern bool pklimit_store_forget(const PklimitTable *table,
								 const char *stored_key);
extern void pklimit_store_flush(const PklimitTable *table,
								const PklimitShard *shard,
								const char *const *keys,
								const PklimitRow *rows, int n,
								const bool *synced,
								const TransactionId *synced_xmin,
								bool *written);
extern int64 pklimit_store_purge(const PklimitTable *table, TimestampTz cutoff,
								 int64 limit, TimestampTz *from);

/* store.c: a key's leases (lease.h) */
struct PklimitLeaseRow;
extern bool pklimit_store_lease_read(const PklimitTable *table,
									 const char *stored_key,
									 struct PklimitLeaseRow *row);
extern bool pklimit_store_lease_write(const PklimitTable *table,
									  const char *stored_key,
									  const struct PklimitLeaseRow *row,
									  TimestampTz now);
extern int64 pklimit_store_lease_purge(const PklimitTable *table,
									   TimestampTz cutoff, int64 limit);

/* True only while store.c's statements run: the RLS predicate. */
extern bool pklimit_in_system;

#endif							/* PKLIMIT_STORE_H */
