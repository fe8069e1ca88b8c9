/*-------------------------------------------------------------------------
 *
 * registry.c
 *		Which pklimit worker serves which database.  A database named in
 *		pklimit.databases has a static background worker, started with the
 *		server and restarted by the postmaster, so no other use of
 *		max_worker_processes can take its background worker; its
 *		registration is reserved.  Any other database gets a dynamic worker
 *		from the first call that needs one.  A worker attaches to its
 *		registration (its registry index names it), leaves it when
 *		idle (retire; dynamic workers only, and only with
 *		pklimit.worker_idle_timeout) or on exit (detach), and a database whose
 *		dynamic worker failed to start or died waits before the next start
 *		(back-off).  Runs in the postmaster (static registration), in callers
 *		(ensure, procno), in the worker (attach, served, retire, detach) and
 *		in the ProcessUtility hook (terminate); the requests themselves
 *		are queue.c's, and this file calls neither the queue nor the purge:
 *		the worker does, under the same lock, when it retires or exits.
 *
 * Locking: the workers[] and backoffs[] arrays are protected by
 * pklimit_lock (settings.h): exclusive to change a registration or a
 * back-off, shared to read one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "postmaster/bgworker.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "compat.h"
#include "registry.h"
#include "settings.h"

/* A static worker that exited is started again after this many seconds. */
#define STATIC_RESTART_SECONDS 10

/* A worker that has not attached this long after registration is dead. */
#define START_GRACE_USEC (10 * USECS_PER_SEC)

/*
 * After a database's worker failed to start or died, its calls wait before
 * starting another: MIN_BACKOFF_USEC, doubling up to MAX_BACKOFF_USEC while
 * failures repeat, so a worker that cannot run does not fill the log.  A
 * served batch ends it.  Each database waits on its own, so one cannot
 * hold up another.
 */
#define MIN_BACKOFF_USEC (1 * USECS_PER_SEC)
#define MAX_BACKOFF_USEC (30 * USECS_PER_SEC)

/* A worker's registration: registry.workers[its registry index]. */
typedef struct Registration
{
	bool		in_use;
	Oid			dboid;
	pid_t		pid;			/* 0 until the worker has attached */
	int			procno;
	TimestampTz registered_at;
} Registration;

/* A database's wait before another worker start, after failures. */
typedef struct Backoff
{
	Oid			dboid;			/* InvalidOid: unused */
	TimestampTz last_failure;
	int64		usec;
} Backoff;

typedef struct Registry
{
	Registration *workers;		/* pklimit_max_workers of them */
	Backoff    *backoffs;		/* pklimit_max_workers of them */
} Registry;

static Registry registry;
static int	my_worker = -1;		/* registry index, in a worker */

/*
 * The databases of pklimit.databases, read in the postmaster and inherited
 * by every process: database i has the static worker of registry index i.
 */
static List *static_databases = NIL;

Size
pklimit_registry_shmem_size(void)
{
	return add_size(mul_size(pklimit_max_workers, sizeof(Registration)),
					mul_size(pklimit_max_workers, sizeof(Backoff)));
}

/* In shmem_startup, with AddinShmemInitLock held. */
void
pklimit_registry_shmem_init(void)
{
	bool		found;
	char	   *base = ShmemInitStruct("pklimit registry",
									   pklimit_registry_shmem_size(), &found);

	if (!found)
		memset(base, 0, pklimit_registry_shmem_size());
	registry.workers = (Registration *) base;
	registry.backoffs = (Backoff *) (registry.workers + pklimit_max_workers);
}

/*
 * The back-off of dboid; with create, a new one (replacing the one
 * whose last failure is oldest) if it has none.  Lock held.
 */
static Backoff *
backoff_of(Oid dboid, bool create)
{
	Backoff    *oldest = &registry.backoffs[0];

	for (int i = 0; i < pklimit_max_workers; i++)
	{
		if (registry.backoffs[i].dboid == dboid)
			return &registry.backoffs[i];
		if (registry.backoffs[i].last_failure < oldest->last_failure)
			oldest = &registry.backoffs[i];
	}
	if (!create)
		return NULL;
	memset(oldest, 0, sizeof(*oldest));
	oldest->dboid = dboid;
	return oldest;
}

/* Note a failed or lost worker of dboid.  Lock held. */
static void
note_start_failure(Oid dboid, TimestampTz now)
{
	Backoff    *b = backoff_of(dboid, true);

	b->last_failure = now;
	b->usec = Min(MAX_BACKOFF_USEC, Max(MIN_BACKOFF_USEC, b->usec * 2));
}

/* The background worker of registry index index. */
static void
worker_definition(BackgroundWorker *bgw, int index)
{
	memset(bgw, 0, sizeof(*bgw));
	bgw->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw->bgw_start_time = BgWorkerStart_RecoveryFinished;
	bgw->bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(bgw->bgw_library_name, BGW_MAXLEN, "pklimit");
	snprintf(bgw->bgw_function_name, BGW_MAXLEN, "pklimit_worker_main");
	snprintf(bgw->bgw_type, BGW_MAXLEN, "pklimit worker");
	bgw->bgw_main_arg = Int32GetDatum(index);
	bgw->bgw_notify_pid = 0;
}

/*
 * In _PG_init at preload: a static worker for each database named in
 * pklimit.databases (a comma-separated list of names).
 */
void
pklimit_register_static_workers(const char *setting)
{
	/* kept for good: backends free the postmaster's context, not this one */
	MemoryContext old_context = MemoryContextSwitchTo(TopMemoryContext);
	char	   *names = pstrdup(setting);
	ListCell   *lc;
	int			i = 0;

	if (!SplitIdentifierString(names, ',', &static_databases))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid list syntax in parameter \"pklimit.databases\""),
				 errhint("List database names separated by commas.")));
	if (list_length(static_databases) > pklimit_max_workers)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pklimit.databases names %d databases, more than pklimit.max_workers (%d)",
						list_length(static_databases), pklimit_max_workers),
				 errhint("Raise pklimit.max_workers.")));
	foreach(lc, static_databases)
	{
		BackgroundWorker bgw;
		const char *name = lfirst(lc);

		worker_definition(&bgw, i++);
		bgw.bgw_restart_time = STATIC_RESTART_SECONDS;
		snprintf(bgw.bgw_name, BGW_MAXLEN, "pklimit worker for database %s",
				 name);
		strlcpy(bgw.bgw_extra, name, BGW_EXTRALEN);
		RegisterBackgroundWorker(&bgw);
	}
	MemoryContextSwitchTo(old_context);
}

/* Is registry index index a static worker's, and of which database? */
const char *
pklimit_registry_static_database(int index)
{
	if (index < 0 || index >= list_length(static_databases))
		return NULL;
	return list_nth(static_databases, index);
}

/*
 * The registry index of this backend's database if it has a static worker,
 * else -1.  Looked up once per backend, in a transaction.
 */
int
pklimit_registry_static_index(void)
{
	static int	index = -2;

	if (index == -2)
	{
		char	   *dbname = get_database_name(MyDatabaseId);
		ListCell   *lc;

		index = -1;
		foreach(lc, static_databases)
		{
			if (dbname != NULL && strcmp(dbname, lfirst(lc)) == 0)
			{
				index = foreach_current_index(lc);
				break;
			}
		}
	}
	return index;
}

/* Register a dynamic background worker for registry index.  Lock held. */
static bool
start_worker(int index, Oid dboid)
{
	BackgroundWorker bgw;

	worker_definition(&bgw, index);
	snprintf(bgw.bgw_name, BGW_MAXLEN, "pklimit worker for database %u", dboid);
	/* no handle: nothing here may raise an error while the lock is held */
	return RegisterDynamicBackgroundWorker(&bgw, NULL);
}

/*
 * A dynamic worker could not be started: say so in the server log, once per
 * try (the back-off spaces them out).  After the lock is released.
 */
void
pklimit_registry_report_start_failure(void)
{
	ereport(LOG,
			(errmsg("pklimit could not start a worker for database \"%s\"",
					get_database_name(MyDatabaseId)),
			 errdetail("No background worker slot was free (max_worker_processes, or pklimit.max_workers)."),
			 errhint("Raise max_worker_processes, or name the database in pklimit.databases so that its worker starts with the server and keeps its slot.")));
}

/*
 * Make sure a worker serves dboid.  Returns the registry index of a running
 * or starting worker, or -1 if none could be started (registry full,
 * max_worker_processes exhausted, or a recent start failed and the back-off
 * has not passed; *start_failed says whether a start was tried and failed
 * now).  A database with a static worker (static_index >= 0) never gets a
 * dynamic one: -1 until its static worker has attached.  Lock held
 * exclusively.
 */
int
pklimit_registry_ensure(Oid dboid, int static_index, TimestampTz now,
						bool *start_failed)
{
	int			free_index = -1;
	Backoff    *backoff;

	*start_failed = false;
	if (static_index >= 0)
		return registry.workers[static_index].in_use ? static_index : -1;
	for (int i = list_length(static_databases); i < pklimit_max_workers; i++)
	{
		Registration *w = &registry.workers[i];

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
	if (!start_worker(free_index, dboid))
	{
		note_start_failure(dboid, now);
		*start_failed = true;
		return -1;
	}

	registry.workers[free_index].in_use = true;
	registry.workers[free_index].dboid = dboid;
	registry.workers[free_index].pid = 0;
	registry.workers[free_index].registered_at = now;
	return free_index;
}

/*
 * The process number of the worker at index, to wake once the lock is
 * released, or -1 if it has not attached yet (it looks at the queue when it
 * does).  Lock held.
 */
int
pklimit_registry_procno(int worker)
{
	if (worker >= 0 && registry.workers[worker].pid != 0)
		return registry.workers[worker].procno;
	return -1;
}

/*
 * Worker exit: leave the registry, after a failure (a dynamic worker's) with
 * a back-off for its database.  Returns false if the worker had retired:
 * its registration may be another's by now.  Lock held exclusively.
 */
bool
pklimit_registry_detach(bool failed)
{
	Registration *w = &registry.workers[my_worker];

	if (w->pid != MyProcPid)
		return false;
	w->in_use = false;
	w->pid = 0;
	if (failed && pklimit_registry_static_database(my_worker) == NULL)
		note_start_failure(w->dboid, GetCurrentTimestamp());
	return true;
}

/*
 * Claim the registration of registry index worker for this process and
 * return the database it serves, or InvalidOid if it was given up meanwhile
 * (the worker then exits).  A static worker, already connected to dboid,
 * claims its reserved registration.  The worker detaches on exit.
 */
Oid
pklimit_registry_attach(int worker, Oid static_dboid)
{
	Registration *w;
	bool		ok;
	Oid			dboid = InvalidOid;

	if (worker < 0 || worker >= pklimit_max_workers)
		return InvalidOid;
	w = &registry.workers[worker];
	LWLockAcquire(pklimit_lock, LW_EXCLUSIVE);
	if (OidIsValid(static_dboid))
	{
		w->in_use = true;
		w->dboid = static_dboid;
		w->pid = 0;
	}
	ok = w->in_use && w->pid == 0;
	if (ok)
	{
		w->pid = MyProcPid;
		w->procno = PKLIMIT_MY_PROCNO;
		dboid = w->dboid;
		my_worker = worker;
	}
	LWLockRelease(pklimit_lock);
	return dboid;
}

/* A batch of dboid was served: no more waiting after failures.  Lock held. */
void
pklimit_registry_served(Oid dboid)
{
	Backoff    *backoff = backoff_of(dboid, false);

	if (backoff != NULL)
		memset(backoff, 0, sizeof(*backoff));
}

/* An idle worker leaves the registry before it exits.  Lock held exclusively. */
void
pklimit_registry_retire(void)
{
	registry.workers[my_worker].in_use = false;
	registry.workers[my_worker].pid = 0;
}

/*
 * The registry indexes whose databases keep a share of the queue
 * (queue.c): every registration in use, running or starting, and the
 * index of every database of
 * pklimit.databases, whose worker may be about to start again.  Their
 * indexes go to workers[] (pklimit_max_workers of them at most).  Lock held.
 */
int
pklimit_registry_sharers(int *workers)
{
	int			n = 0;

	for (int i = 0; i < pklimit_max_workers; i++)
		if (registry.workers[i].in_use || i < list_length(static_databases))
			workers[n++] = i;
	return n;
}

/* The process id of the worker serving dboid, or 0 if none.  Lock held. */
pid_t
pklimit_registry_worker_pid(Oid dboid)
{
	for (int i = 0; i < pklimit_max_workers; i++)
	{
		Registration *w = &registry.workers[i];

		if (w->in_use && w->dboid == dboid && w->pid != 0)
			return w->pid;
	}
	return 0;
}

/* Ask every worker of dboid to exit (before DROP DATABASE). */
void
pklimit_terminate_workers(Oid dboid)
{
	if (!pklimit_preloaded())
		return;
	LWLockAcquire(pklimit_lock, LW_SHARED);
	for (int i = 0; i < pklimit_max_workers; i++)
	{
		Registration *w = &registry.workers[i];

		if (w->in_use && w->dboid == dboid && w->pid != 0)
			kill(w->pid, SIGTERM);
	}
	LWLockRelease(pklimit_lock);
}
