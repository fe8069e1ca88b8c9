/*-------------------------------------------------------------------------
 *
 * cron.c
 *		What pklimit needs of pg_cron besides scheduling its purge (the
 *		install script's pklimit_schedule_purge): whether pg_cron can run a
 *		job, and the database's job gone with DROP EXTENSION pklimit.
 *
 * Unless cron.use_background_workers is on, pg_cron runs a job over a libpq
 * connection of its own to the job's nodename and nodeport, as the job's
 * user, from a process of the server, which has this backend's environment
 * (the same password file).  So the one sure test of whether that
 * connection works is to make it from here, and pklimit_purge_job_error()
 * does: a job whose runs can only fail is then told at once, not found
 * months later in a table that never shrank.  Only pg_cron's own objects
 * are read or called.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "libpq-fe.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "api.h"
#include "hooks.h"
#include "settings.h"

/* How long the test connection may take, as pg_cron's own start of a job. */
#define CONNECT_TIMEOUT_MS (10 * 1000)

/* Is the schema "cron" the pg_cron extension's own, in this database? */
static bool
pg_cron_installed(void)
{
	Oid			extoid = get_extension_oid("pg_cron", true);
	Oid			nspid = get_namespace_oid("cron", true);

	return OidIsValid(extoid) && OidIsValid(nspid) &&
		getExtensionOfObject(NamespaceRelationId, nspid) == extoid;
}

/*
 * Connect as pg_cron would to run a job, and disconnect: NULL if that
 * works, else libpq's error.  Waits on the latch, so a cancel or a
 * termination stops it.
 */
static char *
connection_error(const char *host, int port, const char *dbname,
				 const char *user)
{
	char		port_text[12];
	const char *keywords[] = {"host", "port", "dbname", "user",
	"fallback_application_name", NULL};
	const char *values[] = {host, port_text, dbname, user,
	"pklimit purge job check", NULL};
	PGconn	   *volatile conn;
	char	   *volatile error = NULL;

	snprintf(port_text, sizeof(port_text), "%d", port);
	/* a socket is a file the backend must count, as dblink's are */
	if (!AcquireExternalFD())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not connect as pg_cron would"),
				 errdetail("There are too many open files on the local server.")));
	conn = PQconnectStartParams(keywords, values, false);
	if (conn == NULL)
	{
		ReleaseExternalFD();
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	PG_TRY();
	{
		PostgresPollingStatusType status = PGRES_POLLING_WRITING;
		TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														   CONNECT_TIMEOUT_MS);

		while (PQstatus(conn) != CONNECTION_BAD &&
			   status != PGRES_POLLING_OK && status != PGRES_POLLING_FAILED)
		{
			long		wait_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
																  deadline);

			if (wait_ms <= 0)
			{
				error = psprintf("no answer within %d seconds", CONNECT_TIMEOUT_MS / 1000);
				break;
			}
			(void) WaitLatchOrSocket(MyLatch,
									 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH |
									 (status == PGRES_POLLING_READING ?
									  WL_SOCKET_READABLE : WL_SOCKET_WRITEABLE),
									 PQsocket(conn), wait_ms,
									 pklimit_wait_event(PKLIMIT_WAIT_CRON_CONNECT));
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			status = PQconnectPoll(conn);
		}
		if (error == NULL && PQstatus(conn) != CONNECTION_OK)
		{
			char	   *message = pstrdup(PQerrorMessage(conn));
			int			len = strlen(message);

			while (len > 0 && message[len - 1] == '\n')
				message[--len] = '\0';
			error = message;
		}
	}
	PG_FINALLY();
	{
		PQfinish(conn);
		ReleaseExternalFD();
	}
	PG_END_TRY();
	return error;
}

/*
 * pklimit_purge_job_error(job bigint): NULL if pg_cron can run the job (with
 * cron.use_background_workers on, it needs no connection), else the error
 * its connection meets.  The job is read as the caller, and only a
 * superuser may try the connection of another role's job: it authenticates
 * with the server's own credentials.  Not executable by PUBLIC.
 */
PG_FUNCTION_INFO_V1(pklimit_purge_job_error);
Datum
pklimit_purge_job_error(PG_FUNCTION_ARGS)
{
	Oid			argtype = INT8OID;
	Datum		arg;
	const char *background = GetConfigOption("cron.use_background_workers",
											 true, false);
	MemoryContext caller_context = CurrentMemoryContext;
	HeapTuple	job;
	TupleDesc	desc;
	char	   *host;
	int			port;
	char	   *dbname;
	char	   *user;
	bool		isnull;
	char	   *error;

	pklimit_arg_not_null(fcinfo, 0, "job");
	arg = PG_GETARG_DATUM(0);
	if (!pg_cron_installed())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the pg_cron extension is not installed in this database"),
				 errhint("Call this function in pg_cron's database (cron.database_name).")));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args("SELECT j.nodename, j.nodeport, j.database, j.username"
							  " FROM cron.job j WHERE j.jobid OPERATOR(pg_catalog.=) $1",
							  1, &argtype, &arg, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read pg_cron's job");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("pg_cron has no job %lld", (long long) DatumGetInt64(arg)),
				 errdetail("A role other than a superuser sees only its own jobs.")));
	job = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	host = SPI_getvalue(job, desc, 1);
	port = DatumGetInt32(SPI_getbinval(job, desc, 2, &isnull));
	dbname = SPI_getvalue(job, desc, 3);
	user = SPI_getvalue(job, desc, 4);
	if (host == NULL || isnull || dbname == NULL || user == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pg_cron's job %lld has no host, port, database or user",
						(long long) DatumGetInt64(arg))));
	if (!superuser() && strcmp(user, GetUserNameFromId(GetUserId(), false)) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only a superuser can try the connection of another role's pg_cron job")));
	host = MemoryContextStrdup(caller_context, host);
	dbname = MemoryContextStrdup(caller_context, dbname);
	user = MemoryContextStrdup(caller_context, user);
	SPI_finish();

	/* a job run in a background worker of pg_cron connects to nothing */
	if (background != NULL && strcmp(background, "on") == 0)
		PG_RETURN_NULL();
	error = connection_error(host, port, dbname, user);
	if (error == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(error));
}

/*
 * Remove the pg_cron job that CREATE EXTENSION scheduled, in the same
 * transaction as DROP EXTENSION, so no job is left calling a dropped
 * function.  Only pg_cron's own functions are called.
 */
void
pklimit_cron_unschedule(void)
{
	if (!pg_cron_installed())
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute("SELECT cron.unschedule(j.jobid) FROM cron.job j"
					" WHERE j.jobname OPERATOR(pg_catalog.=) 'pklimit-purge'"
					" AND j.database OPERATOR(pg_catalog.=) pg_catalog.current_database()",
					false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not unschedule the pklimit purge");
	SPI_finish();
}
