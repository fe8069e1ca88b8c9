/*-------------------------------------------------------------------------
 *
 * batch.c
 *		The one seam between a worker's batch and the memory path: apply.c
 *		passes each list of entries it applies through here (a
 *		PklimitMemoryPass, memory.h).  Before the list is applied, a call
 *		whose keys are all in memory is decided there if it may be, and
 *		answered; the keys in memory of the others are written and taken out
 *		first (flush.c), so that no row is written while its key is in
 *		memory.  Inside the one transaction that applied the list, the
 *		memory calls' rows are read as it leaves them; after its commit,
 *		they are read into memory (inout.c).  The entries' state follows
 *		entry.c's rules; the memory path's fallbacks and reads are counted
 *		here, once each.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

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
 * call before it), its requests join leaving.  Returns how many requests
 * the call has.
 */
static int
look_up_call(PklimitEntry **entries, int first, int n, Leaving *leaving)
{
	PklimitRequest requests[PKLIMIT_GROUP_MAX];
	PklimitAnswer answers[PKLIMIT_GROUP_MAX];
	bool		reads = true;
	int			m = 0;
	MemoryOutcome outcome;

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
									  requests[0].call.memory || reads);
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

/*
 * Before the n entries of a list are applied (every list: new requests
 * and set-aside ones tried again): a call whose keys are all in memory is
 * decided there if it is a memory call or only reads, and answered; the
 * keys in memory of the others are written and taken out of memory first,
 * so that they are applied to rows that hold every event (and so is every
 * call after them on those keys, in arrival order).  Returns how many
 * entries are left to apply, moved to the front.
 */
int
pklimit_memory_pass_take(PklimitMemoryPass *pass, PklimitEntry **entries,
						 int n)
{
	Leaving		leaving;
	int			kept = 0;

	if (pklimit_memory_keys == 0 || n == 0)
		return n;
	leaving.requests = palloc(sizeof(PklimitRequest) * n);
	leaving.entries = palloc(sizeof(PklimitEntry *) * n);
	leaving.n = 0;
	for (int first = 0; first < n;)
		first += look_up_call(entries, first, n, &leaving);
	if (leaving.n > 0)
		take_out(pass, &leaving);
	for (int j = 0; j < n; j++)
		if (entries[j]->state != ENTRY_ANSWERED &&
			entries[j]->state != ENTRY_SET_ASIDE)
			entries[kept++] = entries[j];
	pfree(leaving.requests);
	pfree(leaving.entries);
	return kept;
}

/*
 * In the transaction that applied the n entries, before its commit: the
 * rows of the memory calls' keys as it leaves them, to read in after the
 * commit.  Not on a Citus table (each node would count apart), nor on a
 * table before 0.3.0, nor while memory lags (a fallen-back call costs one
 * durable call).
 */
void
pklimit_memory_pass_read_rows(PklimitMemoryPass *pass, PklimitEntry **entries,
							  int n, const PklimitTable *table)
{
	bool		can = pklimit_memory_keys > 0 && table->version >= 3 &&
	!table->citus && !pklimit_memory_lagging();

	pass->relid = table->relid;
	pass->generation = can ? pklimit_memory_generation() : 0;
	for (int j = 0; j < n; j++)
	{
		PklimitEntry *e = entries[j];

		e->memory_read = false;
		if (!can || !e->request.call.memory || e->answer.status != PKLIMIT_OK)
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
			(void) pklimit_store_read(table, e->request.key, false,
									  &e->memory_row);
			e->memory_read = true;
		}
	}
}

/*
 * After that commit: the memory calls' keys go into memory, as committed.
 * A memory call whose key could not be read in counts as a fallback.
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
			pklimit_memory_read_in(e->request.key, e->request.nspid,
								   pass->relid, pass->generation,
								   &e->memory_row) : -1;
		if (read > 0 && e->request.track_stats)
			pklimit_stats_add(PKLIMIT_STAT_MEMORY_READS, 1);
		else if (read < 0 &&
				 (e->request.group == 0 || j == 0 ||
				  entries[j - 1]->request.group != e->request.group))
			count_fallback(e);
		e->memory_read = false;
	}
}
