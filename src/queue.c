/*-------------------------------------------------------------------------
 *
 * queue.c
 *		The fixed-size queue of requests in shared memory, shared by every
 *		database: a calling backend queues its request and sleeps on its
 *		latch until the answer is there or pklimit.timeout is spent; the
 *		worker of its database takes the requests and answers them.  Which
 *		worker serves which database is registry.c's business.
 *
 * Locking: the slots and next_seq are protected by pklimit_lock (see
 * pklimit.h): exclusive to change a slot's state, shared to look at one.
 * A caller that gives up (timeout, cancel, exit) frees a queued slot itself;
 * a slot a worker has already taken is marked abandoned and freed by the
 * worker, so no slot leaks either way.  Latches are set after the lock is
 * released: the woken process takes the lock first thing, and would only
 * sleep again on it.
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
#include "utils/timestamp.h"

#include "compat.h"
#include "pklimit.h"

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
	int			caller_procno;	/* whose latch to set when answered */
	int			worker;			/* registry index of the worker that took it */
	bool		locked;			/* set aside by the worker: its row is locked */
	uint64		seq;			/* arrival order */
	PklimitRequest request;
	PklimitAnswer answer;
} Slot;

typedef struct Queue
{
	uint64		next_seq;
	Slot		slots[FLEXIBLE_ARRAY_MEMBER];	/* pklimit_queue_size */
} Queue;

static Queue *queue = NULL;

Size
pklimit_queue_shmem_size(void)
{
	return add_size(offsetof(Queue, slots),
					mul_size(pklimit_queue_size, sizeof(Slot)));
}

/* In shmem_startup, with AddinShmemInitLock held. */
void
pklimit_queue_shmem_init(void)
{
	bool		found;

	queue = ShmemInitStruct("pklimit queue", pklimit_queue_shmem_size(),
							&found);
	if (!found)
		memset(queue, 0, pklimit_queue_shmem_size());
}

static void
wake(int procno)
{
	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/* A free slot, or -1. Lock held. */
static int
free_slot(void)
{
	for (int i = 0; i < pklimit_queue_size; i++)
		if (queue->slots[i].state == SLOT_FREE)
			return i;
	return -1;
}

/*
 * Stop waiting on a slot: free it, or leave it to the worker that took it.
 * Returns true if an answer was already there (copied to answer if given);
 * *locked says whether the worker had set the request aside for a locked
 * row.
 */
static bool
release_slot(int slotno, PklimitAnswer *answer, bool *locked)
{
	Slot	   *slot = &queue->slots[slotno];
	bool		answered = false;

	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	if (locked)
		*locked = slot->locked;
	switch (slot->state)
	{
		case SLOT_DONE:
			answered = true;
			if (answer)
				*answer = slot->answer;
			slot->state = SLOT_FREE;
			break;
		case SLOT_TAKEN:
			slot->state = SLOT_ABANDONED;
			break;
		case SLOT_QUEUED:
			slot->state = SLOT_FREE;
			break;
		case SLOT_FREE:
		case SLOT_ABANDONED:
			break;
	}
	LWLockRelease(pklimit_lock);
	return answered;
}

/* Error and exit cleanup of a caller's slot (PG_ENSURE_ERROR_CLEANUP). */
static void
release_slot_on_error(int code, Datum arg)
{
	if (LWLockHeldByMe(pklimit_lock))
		LWLockRelease(pklimit_lock);
	release_slot(DatumGetInt32(arg), NULL, NULL);
}

/*
 * One look at the slot after a wait: take the answer if it is there (true),
 * otherwise make sure a worker serves the database (a worker that died or
 * exited idle is replaced, with back-off) and return the one to wake in
 * *procno.  A purge, once taken, runs to its end: *deadline moves to never.
 */
static bool
look(int slotno, int static_index, TimestampTz *deadline, bool *had_worker,
	 int *procno, PklimitAnswer *answer)
{
	Slot	   *slot = &queue->slots[slotno];
	bool		done = false;
	bool		start_failed = false;

	*procno = -1;
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	if (slot->state == SLOT_DONE)
	{
		*answer = slot->answer;
		slot->state = SLOT_FREE;
		done = true;
	}
	else if (slot->state == SLOT_QUEUED)
	{
		int			worker = pklimit_registry_ensure(slot->request.dboid,
													 static_index,
													 GetCurrentTimestamp(),
													 &start_failed);

		*had_worker |= (worker >= 0);
		*procno = pklimit_registry_procno(worker);
	}
	else if (slot->state == SLOT_TAKEN &&
			 !pklimit_op_rules(slot->request.kind).in_batch)
		*deadline = DT_NOEND;
	LWLockRelease(pklimit_lock);
	if (start_failed)
		pklimit_registry_report_start_failure();
	return done;
}

/*
 * Hand one request to this database's worker and wait for its answer, at
 * most until request->deadline (for a purge: until a worker has taken it).
 * Never raises an error of its own: every way the store can be unreachable
 * comes back as answer->status.  Query cancel and termination are honoured
 * while waiting, and free the slot.
 */
void
pklimit_submit(const PklimitRequest *request, PklimitAnswer *answer)
{
	int			slotno;
	int			worker;
	int			procno;
	bool		had_worker;
	bool		start_failed;
	int			static_index = pklimit_registry_static_index();
	TimestampTz deadline = request->deadline;

	memset(answer, 0, sizeof(*answer));

	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	if ((slotno = free_slot()) < 0)
	{
		LWLockRelease(pklimit_lock);
		answer->status = PKLIMIT_QUEUE_FULL;
		return;
	}
	queue->slots[slotno].state = SLOT_QUEUED;
	queue->slots[slotno].caller_procno = PKLIMIT_MY_PROCNO;
	queue->slots[slotno].worker = -1;
	queue->slots[slotno].locked = false;
	queue->slots[slotno].seq = queue->next_seq++;
	queue->slots[slotno].request = *request;
	/* raises no error, so the slot cannot leak before the cleanup below */
	worker = pklimit_registry_ensure(request->dboid, static_index,
									 GetCurrentTimestamp(), &start_failed);
	had_worker = (worker >= 0);
	procno = pklimit_registry_procno(worker);
	LWLockRelease(pklimit_lock);

	PG_ENSURE_ERROR_CLEANUP(release_slot_on_error, Int32GetDatum(slotno));
	{
		if (start_failed)
			pklimit_registry_report_start_failure();
		wake(procno);
		for (;;)
		{
			TimestampTz now = GetCurrentTimestamp();
			bool		locked;

			if (now < deadline)
			{
				(void) WaitLatch(MyLatch,
								 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
								 Min(POLL_MS, (deadline - now + 999) / 1000),
								 pklimit_wait_event(PKLIMIT_WAIT_ANSWER));
				ResetLatch(MyLatch);
				CHECK_FOR_INTERRUPTS();
			}
			if (look(slotno, static_index, &deadline, &had_worker, &procno,
					 answer))
				break;
			wake(procno);
			if (GetCurrentTimestamp() < deadline)
				continue;

			/* the budget was spent waiting for a row lock, or for the worker */
			if (!release_slot(slotno, answer, &locked))
				answer->status = locked ? PKLIMIT_LOCK_TIMEOUT :
					had_worker ? PKLIMIT_TIMEOUT : PKLIMIT_NO_WORKER;
			break;
		}
	}
	PG_END_ENSURE_ERROR_CLEANUP(release_slot_on_error, Int32GetDatum(slotno));
}

/*
 * Worker side.
 */

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
	for (int j = 0; j < n; j++)
	{
		Slot	   *slot = &queue->slots[taken[j]];

		slot->state = SLOT_TAKEN;
		slot->worker = worker;
		entries[j].request = slot->request;
		entries[j].slot = taken[j];
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
			slot->state = SLOT_FREE;
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
pklimit_queue_note_locked(PklimitEntry *const *entries, int n)
{
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	for (int j = 0; j < n; j++)
		queue->slots[entries[j]->slot].locked = true;
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
			slot->state = SLOT_FREE;
		else if (slot->state == SLOT_TAKEN)
		{
			memset(&slot->answer, 0, sizeof(slot->answer));
			slot->answer.status = PKLIMIT_NO_WORKER;
			slot->state = SLOT_DONE;
			wake(slot->caller_procno);
		}
	}
}
