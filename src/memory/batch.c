/*-------------------------------------------------------------------------
 *
 * batch.c
 *		The one seam between a worker's batch and the memory path: apply.c
 *		passes each list of entries it applies through here (a
 *		PklimitMemoryPass, memory.h).  Before the list is applied, a call
 *		whose keys are all in memory is decided there if it may be, and
 *		answered; the keys in memory of the others are written and taken out
 *		first (flush.c), so that no row is written while its key is in
 *		memory.  A memory call on one key that memory lacks has its key's
 *		row read, with those of the others, in one statement that commits
 *		nothing (readin.c), and its key read in, if the admission rule lets
 *		it in, and is then decided in memory too.  Inside the one
 *		transaction that applied the rest, the other memory calls' rows are
 *		read as it leaves them; after its commit, they are read into memory
 *		(inout.c).  The entries' state follows entry.c's rules; the memory
 *		path's misses, fallbacks and reads are counted here, once each.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/timestamp.h"

#include "memory_private.h"
#include "stats.h"

/* The calls of a list whose keys are to be taken out of memory first. */
typedef struct Leaving
{
	PklimitRequest *requests;	/* their requests, in order */
	PklimitEntry **entries;		/* the entries of the same requests */
	int			n;
} Leaving;

/*
 * The memory calls of a list that found their one key missing from memory:
 * their entries' indexes, in list order.
 */
typedef struct Missed
{
	int		   *entries;
	int			n;
} Missed;

/* The group of entry i of the list (pklimit_foreach_in_group). */
#define ENTRY_GROUP(i) (entries[(i)]->request.group)

void
pklimit_memory_pass_begin(PklimitMemoryPass *pass, PklimitSession *session,
						  MemoryContext memory_context)
{
	memset(pass, 0, sizeof(*pass));
	pass->session = session;
	pass->context = memory_context;
	pass->relid = InvalidOid;
}

/*
 * A memory call applied durably, counted once per call (a locked row may
 * set it aside and bring it back): head is the first entry of its call.
 */
static void
count_fallback(PklimitEntry *head)
{
	if (head->request.call.memory && head->request.track_stats &&
		!head->memory_fell_back)
	{
		pklimit_stats_add(PKLIMIT_STAT_MEMORY_FALLBACKS, 1);
		head->memory_fell_back = true;
	}
}

/* A memory call that found a key missing, counted once per call. */
static void
count_miss(PklimitEntry *head)
{
	if (head->request.call.memory && head->request.track_stats &&
		!head->memory_missed)
	{
		pklimit_stats_add(PKLIMIT_STAT_MEMORY_MISSES, 1);
		head->memory_missed = true;
	}
}

/* Is one of the m requests on a key of one of the n? */
static bool
on_a_key_of(const PklimitRequest *requests, int m,
			const PklimitRequest *others, int n)
{
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++)
			if (pklimit_same_key(&requests[i], &others[j]))
				return true;
	return false;
}

/*
 * The call whose requests start at entries[first], of n, looked up in
 * memory: decided there and answered if it is a memory call or only reads
 * and may be; if some key of it is in memory (or is being taken out for a
 * call before it), its requests join leaving; a memory call on one key
 * that memory lacks joins missed.  Returns how many requests the call has.
 */
static int
look_up_call(PklimitEntry **entries, int first, int n, Leaving *leaving,
			 Missed *missed)
{
	PklimitRequest requests[PKLIMIT_GROUP_MAX];
	PklimitAnswer answers[PKLIMIT_GROUP_MAX];
	bool		reads = true;
	int			m = 0;
	MemoryOutcome outcome;

	/* a key's leases are in a table of their own, never in memory */
	if (pklimit_op_is_lease(entries[first]->request.kind))
		return 1;
	pklimit_foreach_in_group(k, first, n, ENTRY_GROUP)
	{
		if (m < PKLIMIT_GROUP_MAX)
			requests[m] = entries[k]->request;
		reads &= (entries[k]->request.kind == PKLIMIT_OP_COUNT ||
				  entries[k]->request.kind == PKLIMIT_OP_PEEK);
		m++;
	}
	if (m > PKLIMIT_GROUP_MAX)
		return m;
	if (on_a_key_of(requests, m, leaving->requests, leaving->n))
		outcome = MEMORY_PRESENT;	/* behind a call taking it out */
	else
		outcome = pklimit_memory_find(requests, answers, m,
									  requests[0].call.memory || reads, false);
	if (outcome == MEMORY_DECIDED)
		for (int k = 0; k < m; k++)
		{
			entries[first + k]->answer = answers[k];
			entries[first + k]->state = ENTRY_ANSWERED;
		}
	else if (outcome == MEMORY_PRESENT)
	{
		for (int k = 0; k < m; k++)
		{
			leaving->requests[leaving->n] = requests[k];
			leaving->entries[leaving->n++] = entries[first + k];
		}
		count_fallback(entries[first]);
	}
	else if (requests[0].call.memory)
	{
		count_miss(entries[first]);
		if (m == 1 && pklimit_memory_kind(requests[0].kind))
			missed->entries[missed->n++] = first;
	}
	return m;
}

/* The group of request i of leaving (pklimit_foreach_in_group). */
#define LEAVING_GROUP(i) (leaving->requests[(i)].group)

/*
 * The keys of the leaving calls written and taken out of memory, all in one
 * transaction; after a failure, each call's keys alone.  A call whose
 * take-out a locked row held up is set aside, as apply.c does; any other
 * failure answers it with the error.
 */
static void
take_out(PklimitMemoryPass *pass, Leaving *leaving)
{
	ErrorData  *error;
	int			written;

	if (pklimit_memory_write_out(pass->session, pass->context,
								 leaving->requests, leaving->n, &error,
								 &written))
		return;
	for (int first = 0, next; first < leaving->n; first = next)
	{
		TimestampTz now;

		next = first + 1;
		pklimit_foreach_in_group(k, first, leaving->n, LEAVING_GROUP)
			next = k + 1;
		if (pklimit_memory_write_out(pass->session, pass->context,
									 &leaving->requests[first], next - first,
									 &error, &written))
			continue;
		now = GetCurrentTimestamp();
		for (int k = first; k < next; k++)
		{
			PklimitEntry *e = leaving->entries[k];

			if (error->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
				pklimit_set_aside(e, now);
			else
			{
				pklimit_answer_unapplied(e, PKLIMIT_APPLY_ERROR);
				pklimit_answer_error(&e->answer, error);
			}
		}
	}
}

/* Is entry e left to apply: not answered, not set aside? */
static bool
left_to_apply(const PklimitEntry *e)
{
	return e->state != ENTRY_ANSWERED && e->state != ENTRY_SET_ASIDE;
}

/* A missed call's key, hashed, to tell most keys apart without strcmp. */
static uint32
key_hash(const PklimitRequest *r)
{
	return hash_combine(hash_bytes((const unsigned char *) r->key, strlen(r->key)),
						hash_bytes_uint32(r->nspid));
}

/*
 * The keys the missed calls of a list may have read in now, each once:
 * keys[k] is the index of the first call on key k; key_of[m] says which key
 * missed call m is on (-1: none to read, its call is applied durably).
 * None while memory lags: a missed call then costs one durable call; nor a
 * key another call of the list left to apply is on (that call is applied
 * to the row, which must then not be in memory, and the calls after it on
 * the key with it, in arrival order).  Returns how many keys.
 */
static int
keys_to_read(PklimitEntry **entries, int n, const Missed *missed, int *keys,
			 int *key_of)
{
	uint32	   *hashes = palloc(sizeof(uint32) * missed->n);
	uint32	   *key_hashes = palloc(sizeof(uint32) * missed->n);
	PklimitEntry **others = palloc(sizeof(PklimitEntry *) * n);
	bool	   *is_missed = palloc0(sizeof(bool) * n);
	int			nothers = 0;
	int			nkeys = 0;

	for (int m = 0; m < missed->n; m++)
		key_of[m] = -1;
	if (pklimit_memory_lagging())
		return 0;
	for (int m = 0; m < missed->n; m++)
		is_missed[missed->entries[m]] = true;
	for (int j = 0; j < n; j++)
		if (!is_missed[j] && left_to_apply(entries[j]))
			others[nothers++] = entries[j];
	for (int m = 0; m < missed->n; m++)
	{
		const PklimitRequest *r = &entries[missed->entries[m]]->request;
		bool		alone = true;

		hashes[m] = key_hash(r);
		for (int k = 0; k < nkeys && key_of[m] < 0; k++)
			if (key_hashes[k] == hashes[m] &&
				pklimit_same_key(&entries[keys[k]]->request, r))
				key_of[m] = k;
		if (key_of[m] >= 0)
			continue;
		for (int o = 0; o < nothers && alone; o++)
			alone = !pklimit_same_key(&others[o]->request, r);
		if (!alone)
			continue;
		key_hashes[nkeys] = hashes[m];
		keys[nkeys] = missed->entries[m];
		key_of[m] = nkeys++;
	}
	return nkeys;
}

/*
 * The missed calls' keys read in, as the admission rule lets them in, in
 * one read of their rows that commits nothing, and the calls then decided
 * in memory, in arrival order.  A call whose key stayed out is applied
 * durably, and its key not read in after (kept_out); one whose key came in
 * but that could not be decided (memory closed meanwhile) has its key
 * taken out again before it is applied.
 */
static void
read_missed(PklimitMemoryPass *pass, PklimitEntry **entries, int n,
			const Missed *missed)
{
	int		   *keys = palloc(sizeof(int) * missed->n);
	int		   *key_of = palloc(sizeof(int) * missed->n);
	int		   *read_as = palloc(sizeof(int) * missed->n);
	MemoryPlace *place = palloc(sizeof(MemoryPlace) * missed->n);
	const char **stored = palloc(sizeof(char *) * missed->n);
	PklimitRow *rows = palloc(sizeof(PklimitRow) * missed->n);
	bool	   *in = palloc0(sizeof(bool) * missed->n);
	int			nkeys = keys_to_read(entries, n, missed, keys, key_of);
	int			nread = 0;
	Oid			relid;
	uint32		generation;
	Leaving		leaving = {palloc(sizeof(PklimitRequest) * n),
	palloc(sizeof(PklimitEntry *) * n), 0};

	/* the keys the admission rule keeps out: not even read (read_as -1) */
	for (int k = 0; k < nkeys; k++)
	{
		const PklimitRequest *r = &entries[keys[k]]->request;

		read_as[k] = -1;
		place[k] = pklimit_memory_admitted(r->key, r->nspid, r->track_stats);
		if (place[k] != MEMORY_PLACE_NONE)
		{
			stored[nread] = r->key;
			read_as[k] = nread++;
		}
	}
	if (nread > 0 &&
		!pklimit_memory_read_rows(pass->session, pass->context, stored, nread,
								  rows, &relid, &generation))
		return;					/* applied, then read in */
	for (int k = 0; k < nkeys; k++)
	{
		const PklimitRequest *r = &entries[keys[k]]->request;
		int			i = read_as[k];

		if (i < 0)
			continue;
		in[i] = pklimit_memory_read_in(r->key, r->nspid, relid, generation,
									   &rows[i], false, place[k]) > 0;
		if (in[i] && r->track_stats)
			pklimit_stats_add(PKLIMIT_STAT_MEMORY_READS, 1);
	}
	for (int m = 0; m < missed->n; m++)
	{
		PklimitEntry *e = entries[missed->entries[m]];
		int			i = key_of[m] < 0 ? -2 : read_as[key_of[m]];

		if (i == -2)
			continue;			/* not read: applied, then read in */
		if (i < 0 || !in[i])
			e->memory_kept_out = true;
		else if (pklimit_memory_find(&e->request, &e->answer, 1, true, true) ==
				 MEMORY_DECIDED)
			e->state = ENTRY_ANSWERED;
		else
		{
			leaving.requests[leaving.n] = e->request;
			leaving.entries[leaving.n++] = e;
		}
	}
	if (leaving.n > 0)
		take_out(pass, &leaving);
}

/*
 * Before the n entries of a list are applied (every list: new requests
 * and set-aside ones tried again): a call whose keys are all in memory is
 * decided there if it is a memory call or only reads, and answered; the
 * keys in memory of the others are written and taken out of memory first,
 * so that they are applied to rows that hold every event (and so is every
 * call after them on those keys, in arrival order).  Then the memory calls
 * on one missing key have it read in, and are decided in memory, where
 * they may be.  Returns how many entries are left to apply, moved to the
 * front.
 */
int
pklimit_memory_pass_take(PklimitMemoryPass *pass, PklimitEntry **entries,
						 int n)
{
	Leaving		leaving;
	Missed		missed;
	int			kept = 0;

	if (pklimit_memory_keys == 0 || n == 0)
		return n;
	leaving.requests = palloc(sizeof(PklimitRequest) * n);
	leaving.entries = palloc(sizeof(PklimitEntry *) * n);
	leaving.n = 0;
	missed.entries = palloc(sizeof(int) * n);
	missed.n = 0;
	for (int j = 0; j < n; j++)
		entries[j]->memory_kept_out = false;
	for (int first = 0; first < n;)
		first += look_up_call(entries, first, n, &leaving, &missed);
	if (leaving.n > 0)
		take_out(pass, &leaving);
	if (missed.n > 0)
		read_missed(pass, entries, n, &missed);
	for (int j = 0; j < n; j++)
		if (left_to_apply(entries[j]))
			entries[kept++] = entries[j];
	pfree(leaving.requests);
	pfree(leaving.entries);
	pfree(missed.entries);
	return kept;
}

/*
 * In the transaction that applied the n entries, before its commit: the
 * rows of the memory calls' keys as it leaves them, to read in after the
 * commit.  On Citus only keys applied on their shards on this node, read
 * there: a key is decided in memory only on the node that holds it
 * (elsewhere each node would count apart).  Not on a table before 0.3.0,
 * nor while memory lags (a fallen-back call costs one durable call).
 */
void
pklimit_memory_pass_read_rows(PklimitMemoryPass *pass, PklimitEntry **entries,
							  int n, const PklimitTable *table)
{
	bool		can = pklimit_memory_keys > 0 && table->version >= 3 &&
	!pklimit_memory_lagging();
	PklimitTable here = *table;

	here.direct = true;

	pass->relid = table->relid;
	pass->generation = can ? pklimit_memory_generation() : 0;
	for (int j = 0; j < n; j++)
	{
		PklimitEntry *e = entries[j];

		e->memory_read = false;
		if (!can || !e->request.call.memory || e->answer.status != PKLIMIT_OK ||
			e->memory_kept_out ||
			(table->citus && !e->direct))
			continue;
		for (int k = 0; k < j && !e->memory_read; k++)
			if (entries[k]->memory_read &&
				pklimit_same_key(&entries[k]->request, &e->request))
			{
				e->memory_row = entries[k]->memory_row;
				e->memory_read = true;
			}
		if (!e->memory_read)
		{
			(void) pklimit_store_read(&here, e->request.key, false,
									  &e->memory_row);
			e->memory_read = true;
		}
	}
}

/*
 * After that commit: the memory calls' keys go into memory, as committed,
 * as the admission rule lets them in.  A memory call whose key could not be
 * read in counts as a fallback.
 */
void
pklimit_memory_pass_read_in(PklimitMemoryPass *pass, PklimitEntry **entries,
							int n)
{
	for (int j = 0; j < n; j++)
	{
		PklimitEntry *e = entries[j];
		int			read;

		if (!e->request.call.memory || e->answer.status != PKLIMIT_OK)
			continue;
		read = e->memory_read ?
			pklimit_memory_admit(e->request.key, e->request.nspid,
								 pass->relid, pass->generation,
								 &e->memory_row, e->request.track_stats) : -1;
		if (read > 0 && e->request.track_stats)
			pklimit_stats_add(PKLIMIT_STAT_MEMORY_READS, 1);
		else if (read < 0 &&
				 (e->request.group == 0 || j == 0 ||
				  entries[j - 1]->request.group != e->request.group))
			count_fallback(e);
		e->memory_read = false;
	}
}
