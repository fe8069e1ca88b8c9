/*-------------------------------------------------------------------------
 *
 * settings.h
 *		The ground floor every other file stands on: pklimit's settings,
 *		its one LWLock over the shared state of the queue, the registry, the
 *		purges and the statistics, and the names of its wait events.
 *		Defined in settings.c; this header includes none of pklimit's own.
 *
 * Locking: every piece of pklimit's shared memory (queue slots and each
 * database's holding of them, worker registrations and back-offs, purge
 * statuses, which database each set of statistics' counters is) is
 * protected by the one LWLock pklimit_lock, taken exclusively by whoever
 * changes any of it and shared by whoever only reads; but for the
 * statistics' counters themselves, which are atomics, and the memory
 * path's table, which has locks of its own (memory/memory_private.h).  It is held for short scans only, never
 * across a latch wait, I/O or a transaction, and nothing that can raise an
 * error runs while it is held, so no error path needs to release it.
 * Functions that expect it held say "Lock held"; each file says which
 * fields it owns.  Order, where several are taken: pklimit_lock, then the
 * memory path's control lock, then its partition locks in ascending order.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_SETTINGS_H
#define PKLIMIT_SETTINGS_H

#include "storage/lwlock.h"

/* pklimit.on_unavailable */
typedef enum PklimitOnUnavailable
{
	PKLIMIT_ON_UNAVAILABLE_ALLOW,
	PKLIMIT_ON_UNAVAILABLE_DENY,
	PKLIMIT_ON_UNAVAILABLE_ERROR
} PklimitOnUnavailable;

/* The settings (docs: README, "Settings"). */
extern int	pklimit_default_max;
extern int64 pklimit_default_window_usec;
extern int	pklimit_timeout;
extern int	pklimit_on_unavailable;
extern int	pklimit_queue_size;
extern int	pklimit_max_workers;
extern int	pklimit_worker_idle_timeout;
extern char *pklimit_databases;
extern bool pklimit_shadow_mode;
extern bool pklimit_asynchronous_commit;
extern bool pklimit_track_stats;
extern int	pklimit_memory_keys;
extern int	pklimit_flush_interval;

extern void pklimit_define_settings(bool preload);

/* pklimit's one lock (above); NULL without preload. */
extern LWLock *pklimit_lock;
extern bool pklimit_preloaded(void);
extern void pklimit_check_preloaded(void);

/* What a pklimit process waits for (pg_stat_activity.wait_event). */
typedef enum PklimitWait
{
	PKLIMIT_WAIT_ANSWER,		/* a caller waits for its answer */
	PKLIMIT_WAIT_IDLE,			/* a worker waits for requests */
	PKLIMIT_WAIT_RETRY,			/* a worker waits to try a locked row again */
	PKLIMIT_WAIT_CRON_CONNECT	/* a backend connects as pg_cron would */
} PklimitWait;

extern uint32 pklimit_wait_event(PklimitWait wait);

#endif							/* PKLIMIT_SETTINGS_H */
