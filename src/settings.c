/*-------------------------------------------------------------------------
 *
 * settings.c
 *		pklimit's settings, defined at module load; its one lock, found in
 *		shared memory by pklimit.c; whether pklimit was preloaded; and the
 *		names of its wait events.  Without shared_preload_libraries only the
 *		per-session settings exist, so CREATE EXTENSION works and every call
 *		raises 55000.  A new setting goes here.  Nothing here knows the
 *		queue, the workers or the table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "limit.h"
#include "settings.h"

static const struct config_enum_entry on_unavailable_options[] = {
	{"allow", PKLIMIT_ON_UNAVAILABLE_ALLOW, false},
	{"deny", PKLIMIT_ON_UNAVAILABLE_DENY, false},
	{"error", PKLIMIT_ON_UNAVAILABLE_ERROR, false},
	{NULL, 0, false}
};

int			pklimit_default_max = 10;
static char *pklimit_default_window;	/* as set; its length is below */
int64		pklimit_default_window_usec = 15 * 60 * USECS_PER_SEC;
int			pklimit_timeout = 2000; /* milliseconds */
int			pklimit_on_unavailable = PKLIMIT_ON_UNAVAILABLE_ALLOW;
int			pklimit_queue_size = 1024;
int			pklimit_max_workers = 8;
int			pklimit_worker_idle_timeout = 0;	/* seconds; 0: never */
char	   *pklimit_databases = NULL;	/* with a static worker each */
bool		pklimit_shadow_mode = false;
bool		pklimit_asynchronous_commit = false;
bool		pklimit_track_stats = true;
int			pklimit_memory_keys = 100000;
int			pklimit_flush_interval = 1000;	/* milliseconds */

/* Protects all of pklimit's shared memory; set by shmem_startup (pklimit.c). */
LWLock	   *pklimit_lock = NULL;

bool
pklimit_preloaded(void)
{
	return pklimit_lock != NULL;
}

/* Every SQL function that needs the workers starts here. */
void
pklimit_check_preloaded(void)
{
	if (!pklimit_preloaded())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pklimit is not loaded"),
				 errdetail("pklimit records events through background workers, which need shared memory set up at server start."),
				 errhint("Add pklimit to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/*
 * The wait event of each PklimitWait, as pg_stat_activity names it: on
 * PostgreSQL 17 and later a name of pklimit's own, registered by the first
 * wait of each kind in each process; before, "Extension".
 */
uint32
pklimit_wait_event(PklimitWait wait)
{
#ifdef PKLIMIT_NAMED_WAIT_EVENTS
	static const char *const names[] = {
		[PKLIMIT_WAIT_ANSWER] = "PklimitAnswer",
		[PKLIMIT_WAIT_IDLE] = "PklimitWorkerIdle",
		[PKLIMIT_WAIT_RETRY] = "PklimitWorkerRetry",
		[PKLIMIT_WAIT_CRON_CONNECT] = "PklimitPurgeJobCheck",
	};
	static uint32 events[lengthof(names)];

	if (events[wait] == 0)
		events[wait] = WaitEventExtensionNew(names[wait]);
	return events[wait];
#else
	return PG_WAIT_EXTENSION;
#endif
}

/*
 * pklimit.default_window takes what the window argument takes: an interval
 * of days, hours, minutes or seconds, checked by the same rules.
 */
static bool
check_default_window(char **newval, void **extra, GucSource source)
{
	Interval	window;
	int64		usec;
	PklimitWindowCheck problem;

	if (!pklimit_parse_interval(*newval, &window))
	{
		GUC_check_errdetail("\"%s\" is not an interval.", *newval);
		GUC_check_errhint("Give the window in days, hours, minutes or seconds, for example '15 minutes'.");
		return false;
	}
	problem = pklimit_window_usec(&window, &usec);
	if (problem != PKLIMIT_WINDOW_OK)
	{
		pklimit_window_guc_error(problem);
		return false;
	}
	*extra = pklimit_guc_malloc(sizeof(int64));
	if (*extra == NULL)
		return false;
	*(int64 *) *extra = usec;
	return true;
}

static void
assign_default_window(const char *newval, void *extra)
{
	pklimit_default_window_usec = *(int64 *) extra;
}

/*
 * The settings a session can change, and those of the workers read at a
 * reload: they exist without preload too.  First a call's.
 */
static void
define_call_settings(void)
{
	DefineCustomIntVariable("pklimit.default_max",
							"Limit used by the one-argument pklimit_allow(key).",
							"Events allowed per key per window.",
							&pklimit_default_max,
							10, 0, INT_MAX,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomStringVariable("pklimit.default_window",
							   "Window used by the one-argument pklimit_allow(key).",
							   "An interval, as the window argument takes it; fixed windows are aligned to the Unix epoch.",
							   &pklimit_default_window,
							   "15min",
							   PGC_USERSET, 0,
							   check_default_window, assign_default_window, NULL);
	DefineCustomIntVariable("pklimit.timeout",
							"The longest a pklimit call waits for its store.",
							NULL,
							&pklimit_timeout,
							2000, 1, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomEnumVariable("pklimit.on_unavailable",
							 "What a pklimit call answers when its store cannot be reached.",
							 "allow: allow the event, with a warning; deny: refuse it, with a warning; error: raise an error.",
							 &pklimit_on_unavailable,
							 PKLIMIT_ON_UNAVAILABLE_ALLOW, on_unavailable_options,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("pklimit.shadow_mode",
							 "Allows the calls a limit refuses, recording them as usual.",
							 "pklimit_check answers such a call allowed, with status shadow, and pklimit_stats counts it in shadow_refused: a limit can be tried out without refusing anyone.",
							 &pklimit_shadow_mode,
							 false,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("pklimit.track_stats",
							 "Counts pklimit's calls, events and waits in pklimit_stats.",
							 NULL,
							 &pklimit_track_stats,
							 true,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
}

/* The workers' settings that a reload changes. */
static void
define_worker_settings(void)
{
	DefineCustomBoolVariable("pklimit.asynchronous_commit",
							 "The workers acknowledge events before their commit is flushed to disk.",
							 "As synchronous_commit = off: a crash of the server or the machine may lose the events acknowledged in about the last three wal_writer_delay; a clean shutdown loses nothing.",
							 &pklimit_asynchronous_commit,
							 false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("pklimit.flush_interval",
							"How often a pklimit worker writes the keys its database holds in memory to the table.",
							"A crash loses at most the memory path's events of twice this; a clean stop loses none.",
							&pklimit_flush_interval,
							1000, 10, 60000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("pklimit.worker_idle_timeout",
							"A pklimit worker with no work for this long exits.",
							"0 (the default) keeps workers running, so a worker slot taken meanwhile cannot leave a database without one.",
							&pklimit_worker_idle_timeout,
							0, 0, INT_MAX / 1000,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
}

/* The settings that size shared memory: preload only. */
static void
define_server_settings(void)
{
	DefineCustomIntVariable("pklimit.queue_size",
							"Requests that can wait for pklimit workers at once, across all databases.",
							NULL,
							&pklimit_queue_size,
							1024, 16, 65536,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("pklimit.max_workers",
							"pklimit workers that can run at once: one per database in use.",
							"Each also takes a max_worker_processes slot while it runs.",
							&pklimit_max_workers,
							8, 1, 1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("pklimit.memory_keys",
							"Keys the memory path (durable => false) can hold in shared memory, across all databases.",
							"About 250 bytes each (a key of 40 bytes); 0 turns the memory path off, and its calls are applied durably.",
							&pklimit_memory_keys,
							100000, 0, INT_MAX / 1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomStringVariable("pklimit.databases",
							   "Databases whose pklimit worker starts with the server and keeps its slot.",
							   "A comma-separated list of database names; each holds one max_worker_processes slot for good.",
							   &pklimit_databases,
							   "",
							   PGC_POSTMASTER, 0,
							   NULL, NULL, NULL);
}

/* At module load: the session's settings always, the server's at preload. */
void
pklimit_define_settings(bool preload)
{
	define_call_settings();
	define_worker_settings();
	if (preload)
		define_server_settings();
	MarkGUCPrefixReserved("pklimit");
}
