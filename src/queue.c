/*-------------------------------------------------------------------------
 *
 * queue.c
 *		The fixed-size queue of requests in shared memory, shared by every
 *		database: a calling backend queues its request in a slot and sleeps
 *		on its latch until the answer is there or pklimit.timeout is spent;
 *		the worker of its database takes the requests and answers them.
 *		Which worker serves which database is registry.c's business.
 *
 * Shares: no database takes another's share of the queue (the rule is
 * shares.c's).  Every database with a worker registration, or listed in
 * pklimit.databases (a sharer, registry.c), keeps a share of
 * pklimit_queue_share() slots.  A database within its share that finds the
 * queue full takes the slots of the youngest queued requests of databases
 * past theirs, which are answered queue_full.  A database that has no
 * worker and can get none now (back-off, no background worker) is answered
 * no_worker at once instead of holding slots for the whole budget.  The
 * slots each sharer holds are counted as they are taken and freed, in the
 * holding of its worker's registry index (a slot's holder), so no decision
 * scans the slots but a push-out, and the recount when a registry index
 * serves another database.
 *
 * Locking: the slots, nfree, next_seq and the holdings are protected by
 * pklimit_lock (settings.h): exclusive to change a slot's state, shared to
 * look at one.  A caller that gives up (timeout, cancel, exit) frees a
 * queued slot itself; a slot a worker has already taken is marked
 * abandoned and freed by the worker, so no slot leaks either way.  Latches
 * are set after the lock is released: the woken process takes the lock
 * first thing, and would only sleep again on it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "queue.h"
#include "registry.h"
#include "settings.h"
#include "shares.h"

/* How often a waiting caller looks again at the worker it relies on. */
#define POLL_MS 100

typedef enum SlotState
{
	SLOT_FREE = 0,
	SLOT_QUEUED,				/* waiting for a worker */
	SLOT_TAKEN,					/* a worker is applying it */
	SLOT_DONE,					/* answered; the caller frees it */
	SLOT_ABANDONED				/* taken, but the caller stopped waiting */
} SlotState;

typedef struct Slot
{
	SlotState	state;
	int			holder;			/* registry index whose holding counts it, or
								 * -1 */
	int			caller_procno;	/* whose latch to set when answered */
	int			worker;			/* registry index of the worker that took it */
	bool		set_aside;		/* set aside by the worker: its row is locked */
	uint64		seq;			/* arrival order */
	PklimitRequest request;
	PklimitAnswer answer;
} Slot;

/* What the slots of one registry index's database hold. */
typedef struct Holding
{
	Oid			dboid;			/* the database counted */
	int			held;			/* its slots not free */
} Holding;

typedef struct Queue
{
	uint64		next_seq;
	int			nfree;			/* slots in state SLOT_FREE */
	Slot		slots[FLEXIBLE_ARRAY_MEMBER];	/* pklimit_queue_size */
} Queue;

static Queue *queue = NULL;
static Holding *holdings = NULL;	/* pklimit_max_workers, after the slots */

/*
 * A caller's scratch space for the sharers' registry indexes, allocated
 * before the lock is first taken (nothing may raise an error under it).
 */
static int *sharers = NULL;		/* pklimit_max_workers */

Size
pklimit_queue_shmem_size(void)
{
	return add_size(add_size(offsetof(Queue, slots),
							 mul_size(pklimit_queue_size, sizeof(Slot))),
					mul_size(pklimit_max_workers, sizeof(Holding)));
}

/* In shmem_startup, with AddinShmemInitLock held. */
void
pklimit_queue_shmem_init(void)
{
	bool		found;

	queue = ShmemInitStruct("pklimit queue", pklimit_queue_shmem_size(),
							&found);
	if (!found)
	{
		memset(queue, 0, pklimit_queue_shmem_size());
		queue->nfree = pklimit_queue_size;
	}
	holdings = (Holding *) &queue->slots[pklimit_queue_size];
}

/*
 * The slots each sharer keeps: an equal part of the queue for each of
 * pklimit.max_workers databases, and never less than the largest call
 * needs.
 */
int
pklimit_queue_share(void)
{
	return Max(PKLIMIT_GROUP_MAX, pklimit_queue_size / pklimit_max_workers);
}

/* A slot goes back to the free ones.  Lock held exclusively. */
static void
free_slot(Slot *slot)
{
	if (slot->holder >= 0)
		holdings[slot->holder].held--;
	slot->state = SLOT_FREE;
	queue->nfree++;
}

/*
 * Count the slots of database dboid in registry index r's holding, from
 * now on: an index that served another database gets its count again from
 * the slots (those of the other database leave the holding; those dboid
 * holds in another index's holding come over).  Only when an index serves
 * another database, so the scan is rare.  Lock held exclusively.
 */
static void
count_holding(int r, Oid dboid)
{
	Holding    *holding = &holdings[r];

	if (holding->dboid == dboid)
		return;
	for (int i = 0; i < pklimit_queue_size; i++)
	{
		Slot	   *slot = &queue->slots[i];

		if (slot->state == SLOT_FREE)
			continue;
		if (slot->request.dboid == dboid && slot->holder != r)
		{
			if (slot->holder >= 0)
				holdings[slot->holder].held--;
			slot->holder = r;
			holding->held++;
		}
		else if (slot->request.dboid != dboid && slot->holder == r)
		{
			slot->holder = -1;
			holding->held--;
		}
	}
	holding->dboid = dboid;
}

static void
wake(int procno)
{
	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/*
 * The slots of one caller's requests: one, or the requests of a group.  A
 * slot is still the caller's while it holds the request of that arrival
 * (seq): a request pushed out of the queue leaves its slot to another.
 */
typedef struct Waiter
{
	int			n;
	int			slots[PKLIMIT_GROUP_MAX];
	uint64		seqs[PKLIMIT_GROUP_MAX];
	bool		done[PKLIMIT_GROUP_MAX];
} Waiter;

/*
 * The caller's slot of request i, or NULL if the request was pushed out of
 * the queue, in which case it is answered queue_full.  Lock held.
 */
static Slot *
slot_of(Waiter *w, int i, PklimitAnswer *answers)
{
	Slot	   *slot = &queue->slots[w->slots[i]];

	if (slot->state != SLOT_FREE && slot->seq == w->seqs[i])
		return slot;
	if (answers)
	{
		memset(&answers[i], 0, sizeof(answers[i]));
		answers[i].status = PKLIMIT_QUEUE_FULL;
	}
	w->done[i] = true;
	return NULL;
}

/*
 * Stop waiting on the slots not done yet: free each, or leave it to the
 * worker that took it.  An answer already there is copied to answers (if
 * given); *set_aside says whether the worker had set a request aside for a
 * locked row.
 */
static void
release_slots(Waiter *w, PklimitAnswer *answers, bool *set_aside)
{
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int i = 0; i < w->n; i++)
	{
		Slot	   *slot;

		if (w->done[i] || (slot = slot_of(w, i, answers)) == NULL)
			continue;
		if (set_aside)
			*set_aside |= slot->set_aside;
		switch (slot->state)
		{
			case SLOT_DONE:
				if (answers)
					answers[i] = slot->answer;
				w->done[i] = true;
				free_slot(slot);
				break;
			case SLOT_TAKEN:
				slot->state = SLOT_ABANDONED;
				break;
			case SLOT_QUEUED:
				free_slot(slot);
				break;
			case SLOT_FREE:
			case SLOT_ABANDONED:
				break;
		}
	}
	LWLockRelease(pklimit_lock);
}

/* Error and exit cleanup of a caller's slots (PG_ENSURE_ERROR_CLEANUP). */
static void
release_slots_on_error(int code, Datum arg)
{
	if (LWLockHeldByMe(pklimit_lock))
		LWLockRelease(pklimit_lock);
	release_slots((Waiter *) DatumGetPointer(arg), NULL, NULL);
}

/*
 * The youngest queued request of a database other than that of registry
 * index mine, of a database past its share (or with no holding), pushed
 * out of the queue with the rest of its group to make room: its slots are
 * free again, and its caller, to be woken in *caller, finds it answered
 * queue_full.  False if there is none.  Lock held exclusively.
 */
static bool
push_out_youngest(int mine, int share, int *caller)
{
	Slot	   *youngest = NULL;
	uint64		group;

	for (int i = 0; i < pklimit_queue_size; i++)
	{
		Slot	   *slot = &queue->slots[i];

		if (slot->state != SLOT_QUEUED || slot->holder == mine ||
			(youngest != NULL && slot->seq < youngest->seq) ||
			(slot->holder >= 0 &&
			 !pklimit_share_past(share, holdings[slot->holder].held)))
			continue;
		youngest = slot;
	}
	if (youngest == NULL)
		return false;
	*caller = youngest->caller_procno;
	group = youngest->request.group;
	for (int i = 0; i < pklimit_queue_size; i++)
	{
		Slot	   *slot = &queue->slots[i];

		if (slot == youngest ||
			(group != 0 && slot->state == SLOT_QUEUED &&
			 slot->request.group == group))
			free_slot(slot);
	}
	return true;
}

/*
 * Room for n more requests in registry index mine's holding, as the rule
 * of shares allows (shares.c).  The callers of the requests pushed out to
 * make it go to pushed[] (*npushed of them), to be woken once the lock is
 * released.  Lock held exclusively.
 */
static bool
room_for_requests(int mine, int n, int *pushed, int *npushed)
{
	int			share = pklimit_queue_share();
	int			nsharers = pklimit_registry_sharers(sharers);
	int			others_unused = 0;

	*npushed = 0;
	for (int s = 0; s < nsharers; s++)
		if (sharers[s] != mine)
			others_unused += pklimit_share_unused(share,
												  holdings[sharers[s]].held);
	switch (pklimit_share_verdict(share, holdings[mine].held, n,
								  queue->nfree, others_unused))
	{
		case PKLIMIT_SHARE_TAKE:
			return true;
		case PKLIMIT_SHARE_REFUSE:
			return false;
		case PKLIMIT_SHARE_MAKE_ROOM:
			break;
	}
	/* the slots of requests of databases past their share */
	while (queue->nfree < n && *npushed < PKLIMIT_GROUP_MAX &&
		   push_out_youngest(mine, share, &pushed[*npushed]))
		(*npushed)++;
	return queue->nfree >= n;
}

/*
 * Queue the n requests of one caller in free slots held by registry index
 * holder (room_for_requests found them), in arrival order; the requests of
 * a group carry its number.  False if there are not n free slots after
 * all.  Lock held exclusively.
 */
static bool
queue_requests(const PklimitRequest *requests, int n, int holder, Waiter *w)
{
	uint64		group = (n > 1) ? queue->next_seq + 1 : 0;

	w->n = 0;
	for (int i = 0; i < pklimit_queue_size && w->n < n; i++)
		if (queue->slots[i].state == SLOT_FREE)
			w->slots[w->n++] = i;
	if (w->n < n)
		return false;			/* can't happen: nfree said there were */
	for (int i = 0; i < n; i++)
	{
		Slot	   *slot = &queue->slots[w->slots[i]];

		slot->state = SLOT_QUEUED;
		slot->holder = holder;
		slot->caller_procno = PKLIMIT_MY_PROCNO;
		slot->worker = -1;
		slot->set_aside = false;
		slot->seq = queue->next_seq++;
		slot->request = requests[i];
		slot->request.group = group;
		w->seqs[i] = slot->seq;
		w->done[i] = false;
	}
	queue->nfree -= n;
	holdings[holder].held += n;
	return true;
}

/*
 * Make sure a worker serves the database of the caller's requests, and
 * return the registry index whose holding its requests count in: -1 if
 * none can now (none runs or starts, and a database not in
 * pklimit.databases is in its back-off, or gets no background worker), so
 * its requests are answered no_worker at once rather than holding slots
 * for their whole budget.  The
 * worker to wake goes to *procno, whether it existed to *had_worker.  Lock
 * held exclusively.
 */
static int
serve(Oid dboid, int static_index, bool *had_worker, int *procno,
	  bool *start_failed)
{
	int			worker = pklimit_registry_ensure(dboid, static_index,
												 GetCurrentTimestamp(),
												 start_failed);
	int			holder = (static_index >= 0) ? static_index : worker;

	*had_worker |= (worker >= 0);
	*procno = pklimit_registry_procno(worker);
	if (holder >= 0)
		count_holding(holder, dboid);
	return holder;
}

/*
 * One look at the slots after a wait: take the answers that are there
 * (true once all are), otherwise make sure a worker serves the database (a
 * worker that died or exited idle is replaced, with back-off; if none can
 * be, the requests still queued are answered no_worker) and return the one
 * to wake in *procno.  A purge, once taken, runs to its end: *deadline moves
 * to never.
 */
static bool
look(Waiter *w, int static_index, TimestampTz *deadline, bool *had_worker,
	 int *procno, PklimitAnswer *answers)
{
	bool		all_done = true;
	bool		queued = false;
	bool		start_failed = false;
	Oid			dboid = InvalidOid;

	*procno = -1;
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int i = 0; i < w->n; i++)
	{
		Slot	   *slot;

		if (w->done[i] || (slot = slot_of(w, i, answers)) == NULL)
			continue;
		if (slot->state == SLOT_DONE)
		{
			answers[i] = slot->answer;
			free_slot(slot);
			w->done[i] = true;
			continue;
		}
		all_done = false;
		dboid = slot->request.dboid;
		queued |= (slot->state == SLOT_QUEUED);
		if (slot->state == SLOT_TAKEN &&
			!pklimit_op_rules(slot->request.kind).in_batch)
			*deadline = DT_NOEND;
	}
	if (queued && serve(dboid, static_index, had_worker, procno,
						&start_failed) < 0)
	{
		for (int i = 0; i < w->n; i++)
		{
			Slot	   *slot;

			if (w->done[i] || (slot = slot_of(w, i, answers)) == NULL ||
				slot->state != SLOT_QUEUED)
				continue;
			free_slot(slot);
			memset(&answers[i], 0, sizeof(answers[i]));
			answers[i].status = PKLIMIT_NO_WORKER;
			w->done[i] = true;
		}
		all_done = true;
		for (int i = 0; i < w->n; i++)
			all_done &= w->done[i];
	}
	LWLockRelease(pklimit_lock);
	if (start_failed)
		pklimit_registry_report_start_failure();
	return all_done;
}

/*
 * Hand n requests (one, or the requests of one group, which the worker
 * applies together) to this database's worker and wait for their answers,
 * at most until their deadline (for a purge: until a worker has taken it).
 * Never raises an error of its own: every way the store can be unreachable
 * comes back as the answers' status.  Query cancel and termination are
 * honoured while waiting, and free the slots.
 */
void
pklimit_submit(const PklimitRequest *requests, PklimitAnswer *answers, int n)
{
	Waiter		w;
	int			procno;
	int			holder;
	int			pushed[PKLIMIT_GROUP_MAX];
	int			npushed = 0;
	bool		had_worker = false;
	bool		start_failed = false;
	PklimitStatus refused = PKLIMIT_OK;
	int			static_index = pklimit_registry_static_index();
	TimestampTz deadline = requests[0].deadline;

	Assert(n >= 1 && n <= PKLIMIT_GROUP_MAX);
	memset(answers, 0, sizeof(PklimitAnswer) * n);
	if (sharers == NULL)
		sharers = MemoryContextAlloc(TopMemoryContext,
									 sizeof(int) * pklimit_max_workers);

	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	holder = serve(requests[0].dboid, static_index, &had_worker, &procno,
				   &start_failed);
	if (holder < 0)
		refused = PKLIMIT_NO_WORKER;
	else if (!room_for_requests(holder, n, pushed, &npushed) ||
			 !queue_requests(requests, n, holder, &w))
		refused = PKLIMIT_QUEUE_FULL;
	LWLockRelease(pklimit_lock);
	for (int i = 0; i < npushed; i++)
		wake(pushed[i]);
	if (refused != PKLIMIT_OK)
	{
		/* only a refused call can have failed to start a worker */
		if (start_failed)
			pklimit_registry_report_start_failure();
		for (int i = 0; i < n; i++)
			answers[i].status = refused;
		return;
	}

	PG_ENSURE_ERROR_CLEANUP(release_slots_on_error, PointerGetDatum(&w));
	{
		wake(procno);
		for (;;)
		{
			TimestampTz now = GetCurrentTimestamp();
			bool		set_aside = false;
			PklimitStatus status;

			if (now < deadline)
			{
				(void) WaitLatch(MyLatch,
								 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
								 Min(POLL_MS, (deadline - now + 999) / 1000),
								 pklimit_wait_event(PKLIMIT_WAIT_ANSWER));
				ResetLatch(MyLatch);
				CHECK_FOR_INTERRUPTS();
			}
			if (look(&w, static_index, &deadline, &had_worker, &procno,
					 answers))
				break;
			wake(procno);
			if (GetCurrentTimestamp() < deadline)
				continue;

			/* the budget was spent waiting for a row lock, or for the worker */
			release_slots(&w, answers, &set_aside);
			status = set_aside ? PKLIMIT_LOCK_TIMEOUT :
				had_worker ? PKLIMIT_TIMEOUT : PKLIMIT_NO_WORKER;
			for (int i = 0; i < n; i++)
				if (!w.done[i])
					answers[i].status = status;
			break;
		}
	}
	PG_END_ENSURE_ERROR_CLEANUP(release_slots_on_error, PointerGetDatum(&w));
}

/*
 * Worker side.
 */

/* The group of the j-th request taken (pklimit_foreach_in_group). */
#define TAKEN_GROUP(j) (queue->slots[taken[(j)]].request.group)

/*
 * Take the (up to) max oldest queued requests of database dboid for the
 * worker at registry index worker, in arrival order, into entries[] (request
 * and slot).  Returns how many.
 */
int
pklimit_queue_take(Oid dboid, int worker, PklimitEntry *entries, int max)
{
	int			taken[PKLIMIT_BATCH_MAX];
	int			n = 0;

	max = Min(max, PKLIMIT_BATCH_MAX);
	if (max <= 0)
		return 0;
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int i = 0; i < pklimit_queue_size; i++)
	{
		Slot	   *slot = &queue->slots[i];
		int			j;

		if (slot->state != SLOT_QUEUED || slot->request.dboid != dboid)
			continue;
		if (n == max && queue->slots[taken[n - 1]].seq < slot->seq)
			continue;			/* younger than all max kept so far */
		/* insertion sort by arrival; when full, the youngest drops out */
		j = (n < max) ? n++ : n - 1;
		for (; j > 0 && queue->slots[taken[j - 1]].seq > slot->seq; j--)
			taken[j] = taken[j - 1];
		taken[j] = i;
	}
	/* a group is taken whole: the youngest, cut by max, waits */
	if (n == max)
	{
		int			last = 0;
		int			members = 0;

		for (int first = 0; first < n; first += members)
		{
			last = first;
			members = 0;
			pklimit_foreach_in_group(j, first, n, TAKEN_GROUP)
				members++;
		}
		if (members < queue->slots[taken[last]].request.group_size)
			n = last;
	}
	for (int j = 0; j < n; j++)
	{
		Slot	   *slot = &queue->slots[taken[j]];

		slot->state = SLOT_TAKEN;
		slot->worker = worker;
		entries[j].request = slot->request;
		entries[j].slot = taken[j];
		entries[j].memory_fell_back = false;
		entries[j].memory_missed = false;
	}
	LWLockRelease(pklimit_lock);
	return n;
}

/*
 * Publish the answers of n entries taken from the queue and wake their
 * callers; the worker's database has been served, so its back-off ends.
 */
void
pklimit_queue_answer(PklimitEntry *const *entries, int n)
{
	int			callers[PKLIMIT_BATCH_MAX];
	int			ncallers = 0;

	Assert(n <= PKLIMIT_BATCH_MAX);
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int j = 0; j < n; j++)
	{
		Slot	   *slot = &queue->slots[entries[j]->slot];

		if (slot->state == SLOT_ABANDONED)
			free_slot(slot);
		else
		{
			slot->answer = entries[j]->answer;
			slot->state = SLOT_DONE;
			callers[ncallers++] = slot->caller_procno;
		}
	}
	pklimit_registry_served(MyDatabaseId);
	LWLockRelease(pklimit_lock);
	for (int j = 0; j < ncallers; j++)
		wake(callers[j]);
}

/*
 * Note that the requests of n taken entries are set aside for a locked row:
 * a caller whose budget runs out before the worker answers then reports
 * lock_timeout, whatever the speed of the machine.
 */
void
pklimit_queue_note_set_aside(PklimitEntry *const *entries, int n)
{
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int j = 0; j < n; j++)
		queue->slots[entries[j]->slot].set_aside = true;
	LWLockRelease(pklimit_lock);
}

/* Has the caller of a taken slot stopped waiting? */
bool
pklimit_queue_abandoned(int slot)
{
	bool		abandoned;

	LWLockAcquire(pklimit_lock, LW_SHARED);
	abandoned = (queue->slots[slot].state == SLOT_ABANDONED);
	LWLockRelease(pklimit_lock);
	return abandoned;
}

/* Is a request of database dboid waiting for a worker?  Lock held. */
bool
pklimit_queue_has_work(Oid dboid)
{
	for (int i = 0; i < pklimit_queue_size; i++)
		if (queue->slots[i].state == SLOT_QUEUED &&
			queue->slots[i].request.dboid == dboid)
			return true;
	return false;
}

/*
 * The requests waiting for their answer now of each of the n databases, in
 * one pass over the slots; dboids[d] InvalidOid stands for every database
 * not among the others.  Lock held.
 */
void
pklimit_queue_depths(const Oid *dboids, int64 *depths, int n)
{
	int			other = -1;

	memset(depths, 0, sizeof(int64) * n);
	for (int d = 0; d < n; d++)
		if (!OidIsValid(dboids[d]))
			other = d;
	for (int i = 0; i < pklimit_queue_size; i++)
	{
		const Slot *slot = &queue->slots[i];
		int			target = other;

		if (slot->state != SLOT_QUEUED && slot->state != SLOT_TAKEN)
			continue;
		for (int d = 0; d < n; d++)
			if (OidIsValid(dboids[d]) && dboids[d] == slot->request.dboid)
			{
				target = d;
				break;
			}
		if (target >= 0)
			depths[target]++;
	}
}

/*
 * A worker exits: answer what it had taken (no_worker), free what was
 * abandoned.  Lock held exclusively; latches are set under it, as a
 * worker's exit is rare and may leave many callers.
 */
void
pklimit_queue_release_worker(int worker)
{
	for (int i = 0; i < pklimit_queue_size; i++)
	{
		Slot	   *slot = &queue->slots[i];

		if (slot->worker != worker)
			continue;
		if (slot->state == SLOT_ABANDONED)
			free_slot(slot);
		else if (slot->state == SLOT_TAKEN)
		{
			memset(&slot->answer, 0, sizeof(slot->answer));
			slot->answer.status = PKLIMIT_NO_WORKER;
			slot->state = SLOT_DONE;
			wake(slot->caller_procno);
		}
	}
}
