/*-------------------------------------------------------------------------
 *
 * key.c
 *		The stored key: the caller's key with its tenant in front, encoded so
 *		that no two (tenant, key) pairs meet, and long ones digested.
 *
 * Encoding (documented in the README):
 *		no tenant			g:<key>
 *		tenant T			t<bytes of T>:<T>:<key>
 *		under policy P		p<bytes of P>:<P>:, then one of the two above
 *		longer than PKLIMIT_MAX_READABLE_KEY bytes
 *							h:<hex SHA-256 of the readable form>
 *
 * The first character tells the forms apart, and the tenant's and the
 * policy's byte lengths say where they end, so separators inside a tenant,
 * a policy or a key cannot move a boundary: a key counted under a policy
 * never meets a key counted with its limit in the call.  The global order of stored keys, which every
 * worker takes rows in, is here too.  This file reads platformkit.tenant and
 * knows nothing of the table or the queue.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "request.h"

/* Replace a long readable key by "h:" and the hex digest of it. */
static char *
digest_key(const char *readable, int len)
{
	pg_cryptohash_ctx *ctx;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char	   *out;

	ctx = pg_cryptohash_create(PG_SHA256);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) readable, len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
	{
		pg_cryptohash_free(ctx);
		elog(ERROR, "could not compute SHA-256 digest of a key");
	}
	pg_cryptohash_free(ctx);

	out = palloc(2 + 2 * PG_SHA256_DIGEST_LENGTH + 1);
	out[0] = 'h';
	out[1] = ':';
	hex_encode((const char *) digest, sizeof(digest), out + 2);
	out[2 + 2 * PG_SHA256_DIGEST_LENGTH] = '\0';
	return out;
}

/*
 * The stored key for the caller's key under the current platformkit.tenant,
 * counted under policy (NULL: with the limit given in the call).  The caller
 * has already rejected NULL and empty keys.
 */
char *
pklimit_stored_key_in(text *key, const char *policy)
{
	const char *tenant = GetConfigOption("platformkit.tenant", true, false);
	StringInfoData buf;

	initStringInfo(&buf);
	if (policy != NULL)
		appendStringInfo(&buf, "p%zu:%s:", strlen(policy), policy);
	if (tenant == NULL || tenant[0] == '\0')
		appendStringInfoString(&buf, "g:");
	else
		appendStringInfo(&buf, "t%zu:%s:", strlen(tenant), tenant);
	appendBinaryStringInfo(&buf, VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key));

	if (buf.len > PKLIMIT_MAX_READABLE_KEY)
	{
		char	   *digested = digest_key(buf.data, buf.len);

		pfree(buf.data);
		return digested;
	}
	return buf.data;
}

char *
pklimit_stored_key(text *key)
{
	return pklimit_stored_key_in(key, NULL);
}

/* Are two requests on the same row: one schema, one stored key? */
bool
pklimit_same_key(const PklimitRequest *a, const PklimitRequest *b)
{
	return a->nspid == b->nspid && strcmp(a->key, b->key) == 0;
}

/*
 * The global order of keys, the same in every worker of every node: by
 * schema, then by stored key, byte by byte.
 */
int
pklimit_key_order(const PklimitRequest *a, const PklimitRequest *b)
{
	if (a->nspid != b->nspid)
		return a->nspid < b->nspid ? -1 : 1;
	return strcmp(a->key, b->key);
}
