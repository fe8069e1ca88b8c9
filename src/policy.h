/*-------------------------------------------------------------------------
 *
 * policy.h
 *		Policies (policy.c; docs/policies.md): a named limit kept as a row of
 *		platformkit_limit_policies, a default row and a row per tenant that
 *		overrides it.  A call that names a policy gets its limit from this
 *		backend's cache, which the table's trigger empties at commit of any
 *		change; and what each policy row decided is counted in shared memory
 *		for pklimit_policy_stats().
 *
 *-------------------------------------------------------------------------
 */
#ifndef PKLIMIT_POLICY_H
#define PKLIMIT_POLICY_H

#include "fmgr.h"

#include "request.h"

/* Longest policy name and override tenant, in bytes (the table checks). */
#define PKLIMIT_POLICY_NAME_MAX 63
#define PKLIMIT_POLICY_TENANT_MAX 255

/* Entries of a backend's policy cache, before it starts over. */
#define PKLIMIT_POLICY_CACHE_MAX 10000

/* Policy rows whose calls pklimit_policy_stats() counts, in the cluster. */
#define PKLIMIT_POLICY_STATS_MAX 1000

typedef struct PklimitPolicyStats PklimitPolicyStats;

/* A policy as a call finds it: the row for its tenant, else the default. */
typedef struct PklimitPolicy
{
	PklimitCall call;			/* its limit, with its cost */
	bool		shadow;			/* mode shadow: counted, never refused */
	struct pg_tz *tz;			/* a calendar window's time zone, or NULL */
	PklimitPolicyStats *stats;	/* its row's counters; NULL: not tracked */
} PklimitPolicy;

/* A caller's role while it runs as a table's owner (policy.c). */
typedef struct PklimitAsOwner
{
	Oid			userid;
	int			sec_context;
	int			nestlevel;
} PklimitAsOwner;

extern void pklimit_as_owner_begin(Oid relid, PklimitAsOwner *saved);
extern void pklimit_as_owner_end(const PklimitAsOwner *saved);

extern void pklimit_policy_get(Oid nspid, const char *name,
							   PklimitPolicy *policy);
extern char *pklimit_policy_name_value(FunctionCallInfo fcinfo, int argno);
extern char *pklimit_policy_key(FunctionCallInfo fcinfo, int keyarg,
								const char *policy);
extern void pklimit_policy_count(const PklimitPolicy *policy,
								 PklimitStatus status, bool limit_allowed,
								 bool shadowed);

extern Size pklimit_policy_shmem_size(void);
extern void pklimit_policy_shmem_init(void);
extern void pklimit_policy_forget_database(Oid dboid);

#endif							/* PKLIMIT_POLICY_H */
