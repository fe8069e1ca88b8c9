/*-------------------------------------------------------------------------
 *
 * queue.c
 *		The fixed-size request queue in shared memory and the registry of
 *		pklimit's background workers, one per database, started on demand.
 *
 * A calling backend puts its request in a free slot, makes sure a worker
 * serves its database, wakes it and sleeps on its own latch until the answer
 * is there or pklimit.timeout is spent.  A worker takes every queued slot of
 * its database, applies them in its own transaction and answers each caller
 * after the commit.  One LWLock guards the whole structure; it is only held
 * for short scans, never across I/O or a transaction.
 *
 * A caller that gives up (timeout, cancel, exit) frees a queued slot itself;
 * a slot a worker has already taken is marked abandoned and freed by the
 * worker, so no slot leaks either way.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
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
/* A worker that has not attached this long after registration is dead. */
#define START_GRACE_USEC (10 * USECS_PER_SEC)
/*
 * After a database's worker failed to start or died, its calls wait before
 * starting another: 1 s, doubling up to 30 s while failures repeat, so a
 * worker that cannot run does not fill the log.  A served batch resets it.
 * Each database waits on its own, so one cannot hold up another.
 */
#define MIN_BACKOFF_USEC (1 * USECS_PER_SEC)
#define MAX_BACKOFF_USEC (30 * USECS_PER_SEC)

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

typedef struct WorkerEntry
{
	bool		in_use;
	Oid			dboid;
	pid_t		pid;			/* 0 until the worker has attached */
	int			procno;
	TimestampTz registered_at;
} WorkerEntry;

typedef struct PurgeEntry
{
	Oid			dboid;			/* InvalidOid: unused */
	PklimitPurgeStatus status;
} PurgeEntry;

/* A database's wait before another worker start, after failures. */
typedef struct Backoff
{
	Oid			dboid;			/* InvalidOid: unused */
	TimestampTz last_failure;
	int64		usec;
} Backoff;

/* Followed in shared memory by the worker, purge, back-off and slot arrays. */
typedef struct SharedState
{
	LWLock	   *lock;
	uint64		next_seq;

} SharedState;

static SharedState *shared = NULL;
static WorkerEntry *workers;	/* pklimit_max_workers entries */
static PurgeEntry *purges;		/* pklimit_max_workers entries */
static Backoff *backoffs;		/* pklimit_max_workers entries */
static Slot *slots;				/* pklimit_queue_size entries */

static PurgeEntry *purge_entry(void);
static int	my_worker = -1;		/* registry index, in a worker */
static bool my_purge_running = false;	/* in a worker */

static Size
shared_size(void)
{
	Size		size = MAXALIGN(sizeof(SharedState));

	size = add_size(size, mul_size(pklimit_max_workers, sizeof(WorkerEntry)));
	size = add_size(size, mul_size(pklimit_max_workers, sizeof(PurgeEntry)));
	size = add_size(size, mul_size(pklimit_max_workers, sizeof(Backoff)));
	size = add_size(size, mul_size(pklimit_queue_size, sizeof(Slot)));
	return size;
}

void
pklimit_shmem_request(void)
{
	RequestAddinShmemSpace(shared_size());
	RequestNamedLWLockTranche("pklimit", 1);
}

void
pklimit_shmem_startup(void)
{
	bool		found;
	char	   *base;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	base = ShmemInitStruct("pklimit", shared_size(), &found);
	shared = (SharedState *) base;
	if (!found)
	{
		memset(base, 0, shared_size());
		shared->lock = &(GetNamedLWLockTranche("pklimit"))->lock;
	}
	workers = (WorkerEntry *) (base + MAXALIGN(sizeof(SharedState)));
	purges = (PurgeEntry *) (workers + pklimit_max_workers);
	backoffs = (Backoff *) (purges + pklimit_max_workers);
	slots = (Slot *) (backoffs + pklimit_max_workers);
	LWLockRelease(AddinShmemInitLock);
}

bool
pklimit_preloaded(void)
{
	return shared != NULL;
}

/*
 * The back-off entry of dboid; with create, a new one (replacing the one
 * whose last failure is oldest) if it has none.  Lock held.
 */
static Backoff *
backoff_of(Oid dboid, bool create)
{
	Backoff    *oldest = &backoffs[0];

	for (int i = 0; i < pklimit_max_workers; i++)
	{
		if (backoffs[i].dboid == dboid)
			return &backoffs[i];
		if (backoffs[i].last_failure < oldest->last_failure)
			oldest = &backoffs[i];
	}
	if (!create)
		return NULL;
	memset(oldest, 0, sizeof(*oldest));
	oldest->dboid = dboid;
	return oldest;
}

/* Note a failed or lost worker of dboid. Lock held. */
static void
note_start_failure(Oid dboid, TimestampTz now)
{
	Backoff    *b = backoff_of(dboid, true);

	b->last_failure = now;
	b->usec = Min(MAX_BACKOFF_USEC, Max(MIN_BACKOFF_USEC, b->usec * 2));
}

static void
set_latch_of(int procno)
{
	SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/*
 * Make sure a worker serves dboid; the lock is held exclusively.  Returns the
 * registry index of a running or starting worker, or -1 if none could be
 * started (registry full, max_worker_processes exhausted, or a recent start
 * failed and the back-off has not passed).
 */
static int
ensure_worker(Oid dboid, TimestampTz now)
{
	int			free_index = -1;
	Backoff    *backoff;
	BackgroundWorker bgw;

	for (int i = 0; i < pklimit_max_workers; i++)
	{
		WorkerEntry *w = &workers[i];

		if (w->in_use && w->pid == 0 &&
			now - w->registered_at > START_GRACE_USEC)
			w->in_use = false;	/* registered but never attached */
		if (w->in_use && w->dboid == dboid)
			return i;
		if (!w->in_use && free_index < 0)
			free_index = i;
	}

	if (free_index < 0)
		return -1;
	backoff = backoff_of(dboid, false);
	if (backoff && now - backoff->last_failure < backoff->usec)
		return -1;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw.bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(bgw.bgw_library_name, BGW_MAXLEN, "pklimit");
	snprintf(bgw.bgw_function_name, BGW_MAXLEN, "pklimit_worker_main");
	snprintf(bgw.bgw_name, BGW_MAXLEN, "pklimit worker for database %u", dboid);
	snprintf(bgw.bgw_type, BGW_MAXLEN, "pklimit worker");
	bgw.bgw_main_arg = Int32GetDatum(free_index);
	bgw.bgw_notify_pid = 0;

	/* no handle: nothing here may raise an error while the lock is held */
	if (!RegisterDynamicBackgroundWorker(&bgw, NULL))
	{
		note_start_failure(dboid, now);
		return -1;
	}

	workers[free_index].in_use = true;
	workers[free_index].dboid = dboid;
	workers[free_index].pid = 0;
	workers[free_index].registered_at = now;
	return free_index;
}

/*
 * The process number of the worker at index, to wake once the lock is
 * released, or -1 if it has not attached yet (it looks at the queue when it
 * does).  Lock held.
 */
static int
worker_procno(int index)
{
	if (index >= 0 && workers[index].pid != 0)
		return workers[index].procno;
	return -1;
}

/*
 * Set a latch after releasing the lock: the woken process takes the lock
 * first thing, and would only sleep again on it.
 */
static void
wake(int procno)
{
	if (procno >= 0)
		set_latch_of(procno);
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
	Slot	   *slot = &slots[slotno];
	bool		answered = false;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
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
	LWLockRelease(shared->lock);
	return answered;
}

/* Error and exit cleanup of a caller's slot (PG_ENSURE_ERROR_CLEANUP). */
static void
release_slot_on_error(int code, Datum arg)
{
	if (LWLockHeldByMe(shared->lock))
		LWLockRelease(shared->lock);
	release_slot(DatumGetInt32(arg), NULL, NULL);
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
	int			slotno = -1;
	int			worker;
	int			procno;
	bool		had_worker;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz deadline = request->deadline;

	memset(answer, 0, sizeof(*answer));

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < pklimit_queue_size; i++)
	{
		if (slots[i].state == SLOT_FREE)
		{
			slotno = i;
			break;
		}
	}
	if (slotno < 0)
	{
		LWLockRelease(shared->lock);
		answer->status = PKLIMIT_QUEUE_FULL;
		return;
	}
	slots[slotno].state = SLOT_QUEUED;
	slots[slotno].caller_procno = PKLIMIT_MY_PROCNO;
	slots[slotno].worker = -1;
	slots[slotno].locked = false;
	slots[slotno].seq = shared->next_seq++;
	slots[slotno].request = *request;
	/* raises no error, so the slot cannot leak before the cleanup below */
	worker = ensure_worker(request->dboid, now);
	had_worker = (worker >= 0);
	procno = worker_procno(worker);
	LWLockRelease(shared->lock);

	PG_ENSURE_ERROR_CLEANUP(release_slot_on_error, Int32GetDatum(slotno));
	{
		wake(procno);
		for (;;)
		{
			long		wait_ms;

			now = GetCurrentTimestamp();
			if (now < deadline)
			{
				wait_ms = Min(POLL_MS, (deadline - now + 999) / 1000);
				(void) WaitLatch(MyLatch,
								 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
								 wait_ms, pklimit_wait_event(PKLIMIT_WAIT_ANSWER));
				ResetLatch(MyLatch);
				CHECK_FOR_INTERRUPTS();
			}

			procno = -1;
			LWLockAcquire(shared->lock, LW_EXCLUSIVE);
			if (slots[slotno].state == SLOT_DONE)
			{
				*answer = slots[slotno].answer;
				slots[slotno].state = SLOT_FREE;
				LWLockRelease(shared->lock);
				break;
			}
			/* a worker that died or exited idle is replaced, with back-off */
			if (slots[slotno].state == SLOT_QUEUED)
			{
				worker = ensure_worker(request->dboid, GetCurrentTimestamp());
				had_worker |= (worker >= 0);
				procno = worker_procno(worker);
			}
			/* a purge, once a worker has it, runs to its end */
			if (request->kind == PKLIMIT_OP_PURGE &&
				slots[slotno].state == SLOT_TAKEN)
				deadline = DT_NOEND;
			LWLockRelease(shared->lock);
			wake(procno);

			now = GetCurrentTimestamp();
			if (now >= deadline)
			{
				bool		locked;

				/* the budget was spent waiting for a row lock, or for the worker */
				if (!release_slot(slotno, answer, &locked))
					answer->status = locked ? PKLIMIT_LOCK_TIMEOUT :
						had_worker ? PKLIMIT_TIMEOUT : PKLIMIT_NO_WORKER;
				break;
			}
		}
	}
	PG_END_ENSURE_ERROR_CLEANUP(release_slot_on_error, Int32GetDatum(slotno));
}

/*
 * Worker side.
 */

/* Worker exit: answer what it had taken, and leave the registry. */
static void
worker_detach(int code, Datum arg)
{
	LWLockReleaseAll();
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	/* a worker that retired holds no slot, and its entry may be reused */
	if (workers[my_worker].pid != MyProcPid)
	{
		LWLockRelease(shared->lock);
		return;
	}
	for (int i = 0; i < pklimit_queue_size; i++)
	{
		Slot	   *slot = &slots[i];

		if (slot->worker != my_worker)
			continue;
		if (slot->state == SLOT_ABANDONED)
			slot->state = SLOT_FREE;
		else if (slot->state == SLOT_TAKEN)
		{
			memset(&slot->answer, 0, sizeof(slot->answer));
			slot->answer.status = PKLIMIT_NO_WORKER;
			slot->state = SLOT_DONE;
			/* under the lock: a worker's exit is rare, and may hold many */
			set_latch_of(slot->caller_procno);
		}
	}
	workers[my_worker].in_use = false;
	workers[my_worker].pid = 0;
	if (code != 0)
		note_start_failure(workers[my_worker].dboid, GetCurrentTimestamp());
	if (my_purge_running)
	{
		PurgeEntry *entry = purge_entry();

		entry->status.running = false;
		entry->status.failed = true;
		entry->status.finished_at = GetCurrentTimestamp();
	}
	LWLockRelease(shared->lock);
}

/*
 * Claim registry entry index for this process and return the database it
 * serves, or InvalidOid if the entry was given up meanwhile (the worker then
 * exits).
 */
Oid
pklimit_worker_attach(int index)
{
	bool		ok;
	Oid			dboid = InvalidOid;

	if (index < 0 || index >= pklimit_max_workers)
		return InvalidOid;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	ok = workers[index].in_use && workers[index].pid == 0;
	if (ok)
	{
		workers[index].pid = MyProcPid;
		workers[index].procno = PKLIMIT_MY_PROCNO;
		dboid = workers[index].dboid;
		my_worker = index;
	}
	LWLockRelease(shared->lock);
	if (ok)
		before_shmem_exit(worker_detach, (Datum) 0);
	return dboid;
}

/*
 * Take the (up to) max oldest queued requests of this worker's database, in
 * arrival order.  Returns how many; their slot numbers go to taken[].
 */
int
pklimit_worker_take(PklimitRequest *requests, int *taken, int max)
{
	Oid			dboid = MyDatabaseId;
	int			n = 0;

	if (max <= 0)
		return 0;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < pklimit_queue_size; i++)
	{
		Slot	   *slot = &slots[i];
		int			j;

		if (slot->state != SLOT_QUEUED || slot->request.dboid != dboid)
			continue;
		if (n == max && slots[taken[n - 1]].seq < slot->seq)
			continue;			/* younger than all max kept so far */
		/* insertion sort by arrival; when full, the youngest drops out */
		j = (n < max) ? n++ : n - 1;
		for (; j > 0 && slots[taken[j - 1]].seq > slot->seq; j--)
			taken[j] = taken[j - 1];
		taken[j] = i;
	}
	for (int j = 0; j < n; j++)
	{
		slots[taken[j]].state = SLOT_TAKEN;
		slots[taken[j]].worker = my_worker;
		requests[j] = slots[taken[j]].request;
	}
	LWLockRelease(shared->lock);
	return n;
}

/* Publish the answers to n taken slots and wake their callers. */
void
pklimit_worker_answer(const int *taken, const PklimitAnswer *answers, int n)
{
	Backoff    *backoff;
	int			callers[PKLIMIT_BATCH_MAX];
	int			ncallers = 0;

	if (n > PKLIMIT_BATCH_MAX)
		elog(ERROR, "pklimit: %d answers exceed a batch", n);
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int j = 0; j < n; j++)
	{
		Slot	   *slot = &slots[taken[j]];

		if (slot->state == SLOT_ABANDONED)
			slot->state = SLOT_FREE;
		else
		{
			slot->answer = answers[j];
			slot->state = SLOT_DONE;
			callers[ncallers++] = slot->caller_procno;
		}
	}
	if ((backoff = backoff_of(MyDatabaseId, false)) != NULL)
		memset(backoff, 0, sizeof(*backoff));	/* served: no more waiting */
	LWLockRelease(shared->lock);
	for (int j = 0; j < ncallers; j++)
		wake(callers[j]);
}

/*
 * Note that the requests of n taken slots are set aside for a locked row: a
 * caller whose budget runs out before the worker answers then reports
 * lock_timeout, whatever the speed of the machine.
 */
void
pklimit_worker_note_locked(const int *taken, int n)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int j = 0; j < n; j++)
		slots[taken[j]].locked = true;
	LWLockRelease(shared->lock);
}

/*
 * An idle worker leaves the registry, unless a request for its database
 * arrived meanwhile.  Returns true if the worker should now exit.
 */
bool
pklimit_worker_retire(void)
{
	bool		retire = true;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < pklimit_queue_size; i++)
	{
		if (slots[i].state == SLOT_QUEUED &&
			slots[i].request.dboid == MyDatabaseId)
		{
			retire = false;
			break;
		}
	}
	if (retire)
	{
		workers[my_worker].in_use = false;
		workers[my_worker].pid = 0;
	}
	LWLockRelease(shared->lock);
	return retire;
}

/* Ask every worker of dboid to exit (before DROP DATABASE). */
void
pklimit_terminate_workers(Oid dboid)
{
	if (shared == NULL)
		return;
	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < pklimit_max_workers; i++)
	{
		WorkerEntry *w = &workers[i];

		if (w->in_use && w->dboid == dboid && w->pid != 0)
			kill(w->pid, SIGTERM);
	}
	LWLockRelease(shared->lock);
}

/* Has the caller of a taken slot stopped waiting? */
bool
pklimit_worker_abandoned(int slotno)
{
	bool		abandoned;

	LWLockAcquire(shared->lock, LW_SHARED);
	abandoned = (slots[slotno].state == SLOT_ABANDONED);
	LWLockRelease(shared->lock);
	return abandoned;
}

/*
 * This database's purge entry.  Each database keeps one; when all are taken,
 * the one whose purge finished longest ago is reused.  Lock held.
 */
static PurgeEntry *
purge_entry(void)
{
	PurgeEntry *oldest = NULL;

	for (int i = 0; i < pklimit_max_workers; i++)
		if (purges[i].dboid == MyDatabaseId)
			return &purges[i];
	for (int i = 0; i < pklimit_max_workers; i++)
	{
		PurgeEntry *e = &purges[i];

		if (e->dboid == InvalidOid)
			return e;
		if (!e->status.running &&
			(oldest == NULL || e->status.finished_at < oldest->status.finished_at))
			oldest = e;
	}
	/* running purges hold at most max_workers - 1 entries besides ours */
	return oldest ? oldest : &purges[0];
}

/* A purge of this database starts. */
void
pklimit_purge_begin(TimestampTz cutoff)
{
	PurgeEntry *entry;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	entry = purge_entry();
	entry->dboid = MyDatabaseId;
	memset(&entry->status, 0, sizeof(entry->status));
	entry->status.running = true;
	entry->status.started_at = GetCurrentTimestamp();
	entry->status.cutoff = cutoff;
	my_purge_running = true;
	LWLockRelease(shared->lock);
}

/* Rows deleted so far by this database's purge; running false at the end. */
void
pklimit_purge_progress(int64 deleted, bool running, bool failed)
{
	PurgeEntry *entry;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	entry = purge_entry();
	entry->status.deleted = deleted;
	entry->status.running = running;
	entry->status.failed = failed;
	if (!running)
		entry->status.finished_at = GetCurrentTimestamp();
	my_purge_running = running;
	LWLockRelease(shared->lock);
}

/* The last purge of dboid since the server started; false if none. */
bool
pklimit_status_of_purge(Oid dboid, PklimitPurgeStatus *status)
{
	bool		found = false;

	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < pklimit_max_workers; i++)
	{
		if (purges[i].dboid == dboid)
		{
			*status = purges[i].status;
			found = true;
			break;
		}
	}
	LWLockRelease(shared->lock);
	return found;
}
