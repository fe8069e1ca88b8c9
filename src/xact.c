/*-------------------------------------------------------------------------
 *
 * xact.c
 *		The worker's transactions, whoever runs them (apply.c for batches,
 *		purge.c for the purge): begin, commit, roll back and abort, whether
 *		a commit reached the synchronous standbys, the lock wait, the
 *		settings sent to Citus's nodes, the timer that cancels a statement,
 *		and the switch to the table's owner.  What runs inside them is the
 *		callers' and store.c's; this file knows neither the queue nor the
 *		table's statements.
 *
 * The worker's session (PklimitSession) is set up by worker.c and passed in:
 * nothing here keeps state of its own but the timer, which one transaction
 * at a time uses and which every use resets first.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"

#include "compat.h"
#include "settings.h"
#include "xact.h"

/*
 * The wait timer (for a Citus node's answer, or a purge's slice): when it
 * runs out, the running statement is cancelled as a cancel does, and
 * pklimit_timer_ran_out() tells that apart from a cancel from outside.
 */
static TimeoutId wait_timer = MAX_TIMEOUTS;
static volatile sig_atomic_t timer_ran_out = false;

static void
wait_timer_handler(void)
{
	timer_ran_out = true;
	InterruptPending = true;
	QueryCancelPending = true;
	SetLatch(MyLatch);
}

/* Before a transaction that uses the timer: registered, not run out. */
void
pklimit_timer_reset(void)
{
	if (wait_timer == MAX_TIMEOUTS)
		wait_timer = RegisterTimeout(USER_TIMEOUT, wait_timer_handler);
	timer_ran_out = false;
}

void
pklimit_timer_start(int ms)
{
	Assert(wait_timer != MAX_TIMEOUTS);
	enable_timeout_after(wait_timer, ms);
}

void
pklimit_timer_stop(void)
{
	if (wait_timer != MAX_TIMEOUTS)
		disable_timeout(wait_timer, false);
}

bool
pklimit_timer_ran_out(void)
{
	return timer_ran_out;
}

/* Set how long a statement waits for a lock (lock_timeout), in ms. */
void
pklimit_set_lock_wait(PklimitSession *session, int ms)
{
	char		value[16];

	if (ms == session->lock_wait_ms)
		return;
	snprintf(value, sizeof(value), "%d", ms);
	SetConfigOption("lock_timeout", value, PGC_SUSET, PGC_S_OVERRIDE);
	session->lock_wait_ms = ms;
}

/*
 * For a Citus table, in a transaction: its rows are written by other nodes'
 * backends, which connect as the table's owner with that role's settings,
 * not the worker's.  Citus sends a transaction's SET LOCAL commands on to
 * every node it writes (worker.c sets citus.propagate_set_commands to
 * local): the worker's lock wait and no timeout but that, its commit mode
 * (a batch that wrote on one node commits there without two-phase commit),
 * and read-write.
 */
void
pklimit_set_node_settings(const PklimitSession *session)
{
	char		lock_wait[64];
	const char *settings[] = {
		lock_wait,
		"SET LOCAL statement_timeout = 0",
		"SET LOCAL idle_in_transaction_session_timeout = 0",
#ifdef PKLIMIT_HAS_TRANSACTION_TIMEOUT
		"SET LOCAL transaction_timeout = 0",
#endif
		/* the transaction's own: flushed for a lease call (apply.c) */
		synchronous_commit == SYNCHRONOUS_COMMIT_OFF ?
		"SET LOCAL synchronous_commit = off" :
		synchronous_commit == SYNCHRONOUS_COMMIT_LOCAL_FLUSH ?
		"SET LOCAL synchronous_commit = local" :
		"SET LOCAL synchronous_commit = on",
		"SET LOCAL transaction_read_only = off",
	};

	snprintf(lock_wait, sizeof(lock_wait), "SET LOCAL lock_timeout = %d",
			 session->lock_wait_ms > 0 ? session->lock_wait_ms :
			 PKLIMIT_BATCH_LOCK_MS);
	/* one command a string: Citus sends on the text of each */
	for (int i = 0; i < lengthof(settings); i++)
		if (SPI_execute(settings[i], false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "pklimit: could not set the nodes' settings");
}

/*
 * Start one of the worker's transactions, with SPI and a snapshot.  Its
 * memory context on return is the transaction's.
 */
void
pklimit_begin_transaction(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();

	/*
	 * A transaction block, as after BEGIN: Citus then makes the transaction
	 * one distributed transaction, whose writes on every node commit together
	 * or not at all.
	 */
	BeginTransactionBlock();
	CommitTransactionCommand();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING, activity);
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

/*
 * Has the commit that ended at commit_end reached the synchronous standbys?
 * Only not if synchronous replication is configured and the wait for it was
 * cut short (the worker is terminating, or its wait was cancelled): the
 * commit is then local only.
 */
static bool
commit_replicated(XLogRecPtr commit_end)
{
	bool		replicated;

	if (!SyncRepRequested() || SyncRepStandbyNames == NULL ||
		SyncRepStandbyNames[0] == '\0')
		return true;
	LWLockAcquire(SyncRepLock, LW_SHARED);
	replicated = (WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH] >= commit_end);
	LWLockRelease(SyncRepLock);
	return replicated;
}

/*
 * Commit one of the worker's transactions.  Returns false if it wrote and
 * its commit is local only, not confirmed by the synchronous standbys
 * (commit_replicated), as PostgreSQL warns a client in the same case.
 */
bool
pklimit_commit_transaction(void)
{
	XLogRecPtr	before = XactLastCommitEnd;

	SPI_finish();
	PopActiveSnapshot();
	if (!EndTransactionBlock(false))
		elog(ERROR, "pklimit: the worker's transaction block was aborted");
	CommitTransactionCommand();
	return XactLastCommitEnd == before || commit_replicated(XactLastCommitEnd);
}

/* Roll back a transaction that raised no error. */
void
pklimit_rollback_transaction(void)
{
	SPI_finish();
	PopActiveSnapshot();
	AbortOutOfAnyTransaction();
}

/*
 * In PG_CATCH: keep the error, in memory_context, and roll back, out of the
 * transaction block too.  The abort also restores the user id, SPI and the
 * snapshot stack.
 */
ErrorData *
pklimit_abort_transaction(MemoryContext memory_context)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(memory_context);
	edata = CopyErrorData();
	FlushErrorState();
	AbortOutOfAnyTransaction();
	return edata;
}

/* The end of any of the worker's transactions, for the statistics views. */
void
pklimit_report_idle(void)
{
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* The role and security context the worker runs as, to come back to. */
void
pklimit_remember_user(PklimitUser *user)
{
	GetUserIdAndSecContext(&user->userid, &user->sec_context);
}

/*
 * Run as the table's owner, so its privileges and row level security apply
 * to pklimit's statements, as a restricted operation (as PostgreSQL runs
 * maintenance as a table's owner): nothing inside can change the role.
 */
void
pklimit_become_owner(const PklimitUser *user, Oid owner)
{
	SetUserIdAndSecContext(owner,
						   user->sec_context |
						   SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

void
pklimit_restore_user(const PklimitUser *user)
{
	SetUserIdAndSecContext(user->userid, user->sec_context);
}

/* The caller's view of a failed transaction, from the error's SQLSTATE. */
void
pklimit_answer_error(PklimitAnswer *answer, const ErrorData *edata)
{
	int			len;

	memset(answer, 0, sizeof(*answer));
	switch (edata->sqlerrcode)
	{
		case ERRCODE_LOCK_NOT_AVAILABLE:
			answer->status = PKLIMIT_LOCK_TIMEOUT;
			break;
		case ERRCODE_UNDEFINED_TABLE:
			answer->status = PKLIMIT_NO_TABLE;
			break;
		case ERRCODE_READ_ONLY_SQL_TRANSACTION:
			answer->status = PKLIMIT_READ_ONLY;
			break;
		default:
			answer->status = PKLIMIT_APPLY_ERROR;
			break;
	}
	answer->sqlstate = edata->sqlerrcode;
	if (edata->message == NULL)
		return;
	len = strlen(edata->message);
	if (len <= PKLIMIT_MESSAGE_MAX)
		memcpy(answer->message, edata->message, len + 1);
	else
	{
		len = pg_mbcliplen(edata->message, len,
						   PKLIMIT_MESSAGE_MAX - strlen(PKLIMIT_MESSAGE_CUT));
		memcpy(answer->message, edata->message, len);
		strcpy(answer->message + len, PKLIMIT_MESSAGE_CUT);
	}
}
