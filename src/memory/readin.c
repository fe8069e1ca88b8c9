/*-------------------------------------------------------------------------
 *
 * readin.c
 *		Keys read into memory by the worker, and which may come in.  The
 *		rows of the keys that memory calls missed are read in one statement,
 *		in a transaction of the worker's own that writes nothing (so it
 *		commits nothing to disk), before their calls are decided in memory.
 *		A key that would take the place of another (memory full, or its
 *		database past its share) takes that of any key once it has been
 *		missed before, recently, and otherwise only that of a key used once
 *		since read in: the admission rule (docs/memory.md,
 *		"Bounded memory and fairness"), so that a scan of keys used once
 *		leaves the keys in use where they are.  Putting a key in is
 *		inout.c's; the statement is store.c's.
 *
 * The admission rule is a doorkeeper, as TinyLFU puts one before its
 * cache: a Bloom filter (lib/bloomfilter) of the keys refused since it was
 * last cleared, cleared each time it has taken ten times as many keys as
 * the database's share.  It is the worker's own, as only the worker reads its
 * database's keys in; a false positive only lets a key in early.  It
 * takes about 10 bits a key: 150 kB for the default share.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/pg_prng.h"
#include "lib/bloomfilter.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "guards.h"
#include "memory_private.h"
#include "stats.h"

/* The doorkeeper, and the keys it took since it was cleared. */
static bloom_filter *doorkeeper = NULL;
static int64 doorkeeper_keys = 0;

/*
 * Keys the doorkeeper takes before it is cleared: ten times the database's
 * share, as TinyLFU samples ten times its cache, so that a key missed again
 * within that many misses comes in.
 */
#define DOORKEEPER_SHARES 10

static int64
doorkeeper_capacity(void)
{
	return (int64) DOORKEEPER_SHARES * Max(1, pklimit_memory_keys / pklimit_max_workers);
}

/*
 * Has the key been missed and refused since the doorkeeper was last
 * cleared?  With remember, a key that has not is remembered now.
 */
static bool
missed_before(const char *stored_key, Oid nspid, bool remember)
{
	Size		len = strlen(stored_key);
	Size		size = sizeof(Oid) + len;
	unsigned char *element = palloc(size);
	bool		seen;

	memcpy(element, &nspid, sizeof(Oid));
	memcpy(element + sizeof(Oid), stored_key, len);
	if (doorkeeper == NULL || doorkeeper_keys >= doorkeeper_capacity())
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		int			kilobytes = (int) (doorkeeper_capacity() * 10 / 8 / 1024);

		if (doorkeeper != NULL)
			bloom_free(doorkeeper);
		/* about 10 bits a key: a false positive in a hundred */
		doorkeeper = bloom_create(doorkeeper_capacity(), Max(64, kilobytes),
								  pg_prng_uint64(&pg_global_prng_state));
		doorkeeper_keys = 0;
		MemoryContextSwitchTo(old);
	}
	seen = !bloom_lacks_element(doorkeeper, element, size);
	if (!seen && remember)
	{
		bloom_add_element(doorkeeper, element, size);
		doorkeeper_keys++;
	}
	pfree(element);
	return seen;
}

/*
 * May stored key come into memory now, and in whose place, as the admission
 * rule says: into a free place, or into one given back for a database below
 * its share (which may always take the place of keys of databases past
 * theirs: docs/security.md, "shares") or for a key missed before; a key
 * missed for the first time only into the place of a key used once, given
 * back now (so that each key admitted so has a place of its own, however
 * many a batch holds).  A key refused is remembered, and counted.
 */
MemoryPlace
pklimit_memory_admitted(const char *stored_key, Oid nspid, bool track_stats)
{
	if (pklimit_memory_room() || missed_before(stored_key, nspid, false))
		return MEMORY_PLACE_ANY;
	if (pklimit_memory_give_back_one_off())
		return MEMORY_PLACE_FREE;
	(void) missed_before(stored_key, nspid, true);
	if (track_stats)
		pklimit_stats_add(PKLIMIT_STAT_MEMORY_REFUSALS, 1);
	return MEMORY_PLACE_NONE;
}

/*
 * Put stored key in memory with its committed state row, after its call
 * was applied, if the admission rule lets it in (giving a key back if need
 * be).  Returns 1 if it was put in, 0 if it was there already, -1 if not.
 */
int
pklimit_memory_admit(const char *stored_key, Oid nspid, Oid relid,
					 uint32 generation, const PklimitRow *row, bool track_stats)
{
	MemoryPlace place = pklimit_memory_admitted(stored_key, nspid, track_stats);

	if (place == MEMORY_PLACE_NONE)
		return -1;
	return pklimit_memory_read_in(stored_key, nspid, relid, generation, row,
								  true, place);
}

/*
 * The committed rows of the n stored keys (of schema nspid), into rows[],
 * read in one transaction that writes nothing, as the table's owner;
 * *relid and *generation say which table and which keys of this database
 * they are.  Returns false if they could not be read (no table, one of
 * 0.2.0 or before or on Citus, where keys are not kept in memory, or an
 * error, logged).
 */
bool
pklimit_memory_read_rows(PklimitSession *session, MemoryContext memory_context,
						 const char *const *keys, int n, PklimitRow *rows,
						 Oid *relid, uint32 *generation)
{
	volatile bool read = false;

	PG_TRY();
	{
		PklimitTable table = {0};
		Oid			nspid;

		pklimit_begin_transaction("pklimit: reading keys into memory");
		nspid = pklimit_extension_namespace();
		if (OidIsValid(nspid))
			pklimit_table_open(nspid, session->on_citus, &table);
		if (OidIsValid(nspid) && table.version >= 3 && !table.citus)
		{
			PklimitUser worker;

			*relid = table.relid;
			*generation = pklimit_memory_generation();
			pklimit_remember_user(&worker);
			pklimit_become_owner(&worker, table.owner);
			pklimit_store_read_many(&table, keys, n, rows);
			pklimit_restore_user(&worker);
			read = true;
		}
		(void) pklimit_commit_transaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata = pklimit_abort_transaction(memory_context);

		ereport(LOG,
				(errmsg("pklimit worker could not read keys into memory: %s",
						edata->message)));
		read = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(memory_context);
	pklimit_report_idle();
	return read;
}
