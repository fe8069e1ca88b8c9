/*-------------------------------------------------------------------------
 *
 * pklimit.h
 *		Declarations shared by pklimit's source files: the operations the
 *		store applies, the key encoding and the settings.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_H
#define PKLIMIT_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* Longest stored key kept readable; longer ones are stored as a digest. */
#define PKLIMIT_MAX_READABLE_KEY 256

/* Most requests a worker applies in one transaction. */
#define PKLIMIT_BATCH_MAX 256

/* Rows a purge deletes per transaction. */
#define PKLIMIT_PURGE_BATCH 1000

/* What one request asks of the table. */
typedef enum PklimitOpKind
{
	PKLIMIT_OP_HIT,				/* record events, return the new count */
	PKLIMIT_OP_COUNT,			/* read the count of the open window */
	PKLIMIT_OP_FORGET,			/* delete the key's row */
	PKLIMIT_OP_PURGE			/* delete rows whose window ended before cutoff */
} PklimitOpKind;

/* The answer to one operation. */
typedef struct PklimitResult
{
	bool		found;			/* a row existed (count, forget) */
	int64		count;			/* count after the operation */
	TimestampTz window_end;		/* end of the window the count belongs to */
	TimestampTz event_at;		/* server clock when the event was recorded */
} PklimitResult;

/* Why an operation was not applied; PKLIMIT_OK when it was. */
typedef enum PklimitStatus
{
	PKLIMIT_OK = 0,
	PKLIMIT_TIMEOUT,			/* no answer within pklimit.timeout */
	PKLIMIT_QUEUE_FULL,			/* every queue slot in use */
	PKLIMIT_NO_WORKER,			/* no worker could be started */
	PKLIMIT_READ_ONLY,			/* hot standby: writes go to the primary */
	PKLIMIT_LOCK_TIMEOUT,		/* the budget ran out waiting for a row lock */
	PKLIMIT_NO_TABLE,			/* platformkit_limits is missing */
	PKLIMIT_STORE_ERROR			/* any other error while applying */
} PklimitStatus;

/* One request as the caller hands it to a worker. */
typedef struct PklimitRequest
{
	PklimitOpKind kind;
	Oid			dboid;			/* database the caller is connected to */
	Oid			nspid;			/* schema of the extension's table */
	int64		window_usec;	/* window length, for a hit */
	TimestampTz deadline;		/* the caller stops waiting at this moment */
	TimestampTz cutoff;			/* for a purge */
	Oid			userid;			/* for a purge: the role it runs as */
	char		key[PKLIMIT_MAX_READABLE_KEY + 1];	/* stored key */
} PklimitRequest;

/* The worker's answer to one request. */
typedef struct PklimitAnswer
{
	PklimitStatus status;
	int			sqlstate;		/* for a store error */
	char		message[128];	/* for a store error */
	PklimitResult result;
} PklimitAnswer;

/* What a database's last purge did, since the server started. */
typedef struct PklimitPurgeStatus
{
	bool		running;
	TimestampTz started_at;
	TimestampTz finished_at;	/* 0 while the first purge runs */
	TimestampTz cutoff;			/* rows whose window ended before this */
	int64		deleted;		/* rows deleted so far, or in all */
	bool		failed;
} PklimitPurgeStatus;

/* What a pklimit process waits for (pg_stat_activity.wait_event). */
typedef enum PklimitWait
{
	PKLIMIT_WAIT_ANSWER,		/* a caller waits for its answer */
	PKLIMIT_WAIT_IDLE,			/* a worker waits for requests */
	PKLIMIT_WAIT_RETRY			/* a worker waits to try a locked row again */
} PklimitWait;

/* settings and wait events (pklimit.c) */
extern uint32 pklimit_wait_event(PklimitWait wait);

extern int	pklimit_default_max;
extern int	pklimit_default_window;
extern int	pklimit_timeout;
extern int	pklimit_queue_size;
extern int	pklimit_max_workers;
extern int	pklimit_worker_idle_timeout;

/* key.c */
extern char *pklimit_stored_key(text *key);

/* queue.c: shared memory, the request queue and the worker registry */
extern void pklimit_shmem_request(void);
extern void pklimit_shmem_startup(void);
extern bool pklimit_preloaded(void);
extern void pklimit_submit(const PklimitRequest *request, PklimitAnswer *answer);
extern Oid	pklimit_worker_attach(int index);
extern int	pklimit_worker_take(PklimitRequest *requests, int *slots, int max);
extern void pklimit_worker_answer(const int *slots, const PklimitAnswer *answers,
								  int n);
extern void pklimit_worker_note_locked(const int *slots, int n);
extern bool pklimit_worker_retire(void);
extern void pklimit_terminate_workers(Oid dboid);
extern bool pklimit_worker_abandoned(int slot);
extern void pklimit_purge_begin(TimestampTz cutoff);
extern void pklimit_purge_progress(int64 deleted, bool running, bool failed);
extern bool pklimit_status_of_purge(Oid dboid, PklimitPurgeStatus *status);

/* worker.c */
extern PGDLLEXPORT void pklimit_worker_main(Datum main_arg);

/* store.c: applies one operation to the table, in the current transaction */
extern void pklimit_store_apply(Oid nspid, PklimitOpKind kind,
								const char *stored_key, int64 window_usec,
								int64 events, PklimitResult *result);
extern int64 pklimit_store_purge(Oid nspid, TimestampTz cutoff, int64 limit,
								 TimestampTz *from);
extern Oid	pklimit_store_owner(Oid nspid);
extern bool pklimit_store_table_free(Oid nspid);
extern bool pklimit_in_system;

#endif							/* PKLIMIT_H */
