/*-------------------------------------------------------------------------
 *
 * inout.c
 *		Keys in and out of memory, as the worker moves them: a key read in
 *		with the state its transaction committed; the changed keys of its
 *		database collected for a flush, or the keys of durable calls
 *		collected on their way out; and after the flush's commit, marked
 *		written or taken out.  Only the worker of a key's database puts it
 *		in or takes it out.  The transactions that write them are flush.c's;
 *		nothing here touches pklimit's table.
 *
 * Locking: memory_private.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "memory_private.h"

/*
 * Key k (tag, hashcode) of database d put in a free directory item, its
 * tag's bytes those of area_tag (in the keys' area).  Control lock and its
 * partition lock held exclusively, and d may take one.
 */
static MemoryKey *
new_key(const MemoryTag *tag, const MemoryTag *area_tag, uint32 hashcode,
		int d)
{
	bool		found;
	MemoryKey  *k;

	/* a free item means a free element: both number memory_keys */
	k = hash_search_with_hash_value(pklimit_memory_table, tag, hashcode,
									HASH_ENTER_NULL, &found);
	if (k == NULL)
		elog(ERROR, "pklimit: no element for a free memory directory item");
	k->tag = *area_tag;
	k->item = pklimit_memory_free_items[--pklimit_memory_shared->nfree];
	k->db = d;
	pklimit_memory_directory[k->item].key = k;
	pklimit_memory_directory[k->item].hashcode = hashcode;
	pklimit_memory_directory[k->item].dboid = tag->dboid;
	database_at(d)->held++;
	return k;
}

/*
 * One try at putting tag in memory with the state row: 1 if it was put in
 * (a new key, with area_tag's bytes), 2 if it took the place of its key of
 * a dropped extension, 0 if it was there already, -1 if no key could be had
 * (then *d says for which database to give keys back, or -1 if it has no
 * index).
 */
static int
try_read_in(const MemoryTag *tag, const MemoryTag *area_tag, uint32 hashcode,
			Oid relid, uint32 generation, const PklimitRow *row, bool used,
			int *d)
{
	LWLock	   *lock = partition_lock(hashcode);
	MemoryKey  *k;
	int			result = -1;

	LWLockAcquire(control_lock(), LW_EXCLUSIVE);
	*d = pklimit_memory_claim_database(tag->dboid);
	if (*d < 0)
	{
		LWLockRelease(control_lock());
		return -1;
	}
	LWLockAcquire(lock, LW_EXCLUSIVE);
	k = hash_search_with_hash_value(pklimit_memory_table, tag, hashcode,
									HASH_FIND, NULL);
	if (k != NULL && key_current(k))
		result = 0;				/* there already: only this worker puts its
								 * database's keys in */
	else if (k != NULL || pklimit_memory_may_take(*d))
	{
		/* new, or replacing in its item one of a dropped extension */
		result = (k == NULL) ? 1 : 2;
		if (k == NULL)
			k = new_key(tag, area_tag, hashcode, *d);
		k->generation = generation;
		k->relid = relid;
		k->leaving = false;
		k->row = *row;
		k->changes = k->written = 0;
		k->synced = row->exists;
		k->synced_xmin = row->xmin;
		k->uses = used ? 1 : 0;
		k->last_used = used_now();
	}
	LWLockRelease(lock);
	LWLockRelease(control_lock());
	return result;
}

/*
 * Put stored key (of this database, schema nspid, table relid) in memory
 * with the state row, as committed by the worker under generation, into a
 * free place or one given back, as place says; used: the call that read it
 * in was applied already (not to be decided in memory).  Returns 1 if it
 * was put in, 0 if it was there already, -1 if no place could be had.
 * Which key may take another's place is readin.c's to say.
 */
int
pklimit_memory_read_in(const char *stored_key, Oid nspid, Oid relid,
					   uint32 generation, const PklimitRow *row, bool used,
					   MemoryPlace place)
{
	MemoryTag	tag;
	MemoryTag	area_tag;
	uint32		hashcode;
	int			d;
	int			result;

	if (!memory_on())
		return -1;
	memory_tag_of(&tag, MyDatabaseId, nspid, stored_key);
	hashcode = get_hash_value(pklimit_memory_table, &tag);

	/* its bytes in the keys' area first: no lock is held while allocating */
	area_tag = tag;
	area_tag.in_area = true;
	area_tag.bytes.area = dsa_allocate_extended(pklimit_memory_area(),
												Max(tag.len, 1),
												DSA_ALLOC_NO_OOM);
	if (!DsaPointerIsValid(area_tag.bytes.area))
		return -1;				/* the area is full: like no free key */
	memcpy(dsa_get_address(pklimit_memory_area(), area_tag.bytes.area),
		   stored_key, tag.len);

	result = try_read_in(&tag, &area_tag, hashcode, relid, generation, row,
						 used, &d);
	if (result < 0 && place == MEMORY_PLACE_ANY && d >= 0 &&
		pklimit_memory_give_back(d) > 0)
		result = try_read_in(&tag, &area_tag, hashcode, relid, generation,
							 row, used, &d);
	if (result != 1)
		dsa_free(pklimit_memory_area(), area_tag.bytes.area);	/* unused */
	return result > 0 ? 1 : result;
}

/* Copy key k of item into *c, to be written or not. */
static void
copy_key(MemoryCopy *c, int item, MemoryKey *k, bool write)
{
	c->item = item;
	c->key = k;
	memcpy(c->stored_key, memory_tag_bytes(&k->tag), k->tag.len);
	c->stored_key[k->tag.len] = '\0';
	c->row = k->row;
	c->changes = k->changes;
	c->write = write;
	c->synced = k->synced;
	c->synced_xmin = k->synced_xmin;
}

/*
 * The keys of the n requests that are in memory, marked on their way out,
 * into copies[]; those current, of table relid, changed and with a row are
 * to be written.  Returns how many.
 */
static int
collect_leaving(MemoryCopy *copies, Oid relid, const PklimitRequest *requests,
				int n)
{
	int			ncopies = 0;

	for (int i = 0; i < n; i++)
	{
		MemoryLookup l;
		MemoryKey  *k;

		pklimit_memory_lookup(&requests[i], 1, &l);
		pklimit_memory_lock(&l, LW_EXCLUSIVE);
		k = hash_search_with_hash_value(pklimit_memory_table, &l.tags[0],
										l.hashcodes[0], HASH_FIND, NULL);
		if (k != NULL && !k->leaving)
		{
			k->leaving = true;
			copy_key(&copies[ncopies++], k->item, k,
					 key_current(k) && k->relid == relid &&
					 k->changes != k->written && k->row.exists);
		}
		pklimit_memory_unlock(&l);
	}
	return ncopies;
}

/* Take out the key of item i if it is still k, stale for table relid. */
static void
discard_stale(int i, MemoryKey *k, Oid relid)
{
	DirectoryItem *item = &pklimit_memory_directory[i];
	LWLock	   *lock = partition_lock(item->hashcode);

	LWLockAcquire(control_lock(), LW_EXCLUSIVE);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	if (item->key == k && k != NULL && !k->leaving &&
		(!key_current(k) || k->relid != relid))
		pklimit_memory_remove(i);
	LWLockRelease(lock);
	LWLockRelease(control_lock());
}

/*
 * The changed keys of this database, copied into *copies (palloc'd): those
 * still current, of table relid, changed since their last flush, with a
 * row; with all, the others too, not to be written.  Stale keys (of a
 * dropped extension, or of another table than relid) are discarded.
 * Returns how many.
 */
static int
collect_changed(MemoryCopy **copies, Oid relid, bool all)
{
	int			size = 64;
	int			ncopies = 0;
	MemoryCopy *c = palloc(sizeof(MemoryCopy) * size);

	for (int i = 0; i < pklimit_memory_keys; i++)
	{
		DirectoryItem *item = &pklimit_memory_directory[i];
		LWLock	   *lock;
		MemoryKey  *k;
		bool		stale = false;

		if (item->dboid != MyDatabaseId)
			continue;
		if (ncopies == size)
		{
			size *= 2;
			c = repalloc(c, sizeof(MemoryCopy) * size);
		}
		lock = partition_lock(item->hashcode);
		LWLockAcquire(lock, LW_SHARED);
		k = item->key;
		if (k != NULL && item->dboid == MyDatabaseId && !k->leaving)
		{
			stale = !key_current(k) || k->relid != relid;
			if (!stale && k->changes != k->written && k->row.exists)
				copy_key(&c[ncopies++], i, k, true);
			else if (!stale && all)
				copy_key(&c[ncopies++], i, k, false);
		}
		LWLockRelease(lock);
		if (stale)
			discard_stale(i, k, relid);
	}
	*copies = c;
	return ncopies;
}

/*
 * Keys of this database copied for a write (flush.c) into *copies
 * (palloc'd): with requests, the keys of the n requests, marked on their
 * way out, changed or not; without, every changed key, or with all every
 * key, the changed ones to be written (collect_changed).  Returns how many
 * were copied.
 */
int
pklimit_memory_collect(MemoryCopy **copies, Oid relid,
					   const PklimitRequest *requests, int n, bool all)
{
	*copies = NULL;
	if (!memory_on())
		return 0;
	if (requests == NULL)
		return collect_changed(copies, relid, all);
	*copies = palloc(sizeof(MemoryCopy) * n);
	return collect_leaving(*copies, relid, requests, n);
}

/* After the flush of copies committed: their changes are written. */
void
pklimit_memory_written(const MemoryCopy *copies, int n)
{
	for (int i = 0; i < n; i++)
	{
		DirectoryItem *item = &pklimit_memory_directory[copies[i].item];
		LWLock	   *lock = partition_lock(item->hashcode);
		MemoryKey  *k = copies[i].key;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		if (item->key == k && copies[i].changes > k->written)
			k->written = copies[i].changes;
		if (item->key == k && copies[i].write)
		{
			/* the row is the version written now */
			k->synced = true;
			k->synced_xmin = copies[i].synced_xmin;
		}
		LWLockRelease(lock);
	}
}

/*
 * The keys of copies (collected as leaving) come out of memory: their
 * state is committed in the table.  With stay, they stay instead, changed
 * by nothing meanwhile: that commit failed.
 */
void
pklimit_memory_leave(const MemoryCopy *copies, int n, bool stay)
{
	if (n == 0)
		return;
	LWLockAcquire(control_lock(), LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
	{
		DirectoryItem *item = &pklimit_memory_directory[copies[i].item];
		LWLock	   *lock = partition_lock(item->hashcode);

		LWLockAcquire(lock, LW_EXCLUSIVE);
		if (item->key == copies[i].key)
		{
			if (stay)
				copies[i].key->leaving = false;
			else
				pklimit_memory_remove(copies[i].item);
		}
		LWLockRelease(lock);
	}
	LWLockRelease(control_lock());
}

/*
 * The keys of the copies marked dropped come out of memory unwritten, if
 * they are still the keys copied: on Citus, their shards moved to another
 * node, or their rows changed (another node's call, a purge: flush.c).
 * Logged, since their events since the last flush are lost.
 */
void
pklimit_memory_drop(const MemoryCopy *copies, const bool *dropped, int n)
{
	int			ndropped = 0;

	LWLockAcquire(control_lock(), LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
	{
		DirectoryItem *item = &pklimit_memory_directory[copies[i].item];
		LWLock	   *lock;

		if (!dropped[i])
			continue;
		lock = partition_lock(item->hashcode);
		LWLockAcquire(lock, LW_EXCLUSIVE);
		if (item->key == copies[i].key)
		{
			pklimit_memory_remove(copies[i].item);
			ndropped++;
		}
		LWLockRelease(lock);
	}
	LWLockRelease(control_lock());
	if (ndropped > 0)
		ereport(LOG,
				(errmsg_plural("pklimit dropped %d key from memory unwritten: its row changed, or its shard moved, since its last flush",
							   "pklimit dropped %d keys from memory unwritten: their rows changed, or their shards moved, since their last flush",
							   ndropped, ndropped),
				 errdetail("Their events since their last flush are lost, as at a crash."),
				 errhint("Send each call to the node that holds its key: pklimit_node(key) names it.")));
}

/*
 * After an exit cut a take-out short (a termination inside its
 * transaction): this database's keys on their way out stay, so the last
 * flush writes them.  Only this database's worker marks them.
 */
void
pklimit_memory_stay_all(void)
{
	if (!memory_on())
		return;
	for (int i = 0; i < pklimit_memory_keys; i++)
	{
		DirectoryItem *item = &pklimit_memory_directory[i];
		LWLock	   *lock;

		if (item->dboid != MyDatabaseId)
			continue;
		lock = partition_lock(item->hashcode);
		LWLockAcquire(lock, LW_EXCLUSIVE);
		if (item->key != NULL && item->dboid == MyDatabaseId)
			item->key->leaving = false;
		LWLockRelease(lock);
	}
}
