/*-------------------------------------------------------------------------
 *
 * pklimit.c
 *		Module load: _PG_init, which defines the settings (settings.c) and,
 *		at preload, installs the hooks and asks for pklimit's shared memory,
 *		which the shared-memory hooks here size and set up, each part by the
 *		file that owns it.  Nothing else lives here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "hooks.h"
#include "memory.h"
#include "policy.h"
#include "purge.h"
#include "queue.h"
#include "registry.h"
#include "settings.h"
#include "stats.h"

PG_MODULE_MAGIC;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();

	/*
	 * four allocations, each rounded up to a cache line; then the memory
	 * path's, sized by memory/keys.c
	 */
	RequestAddinShmemSpace(add_size(add_size(CACHELINEALIGN(pklimit_queue_shmem_size()),
											 CACHELINEALIGN(pklimit_registry_shmem_size())),
									add_size(CACHELINEALIGN(pklimit_purge_shmem_size()),
											 CACHELINEALIGN(pklimit_stats_shmem_size()))));
	RequestAddinShmemSpace(CACHELINEALIGN(pklimit_policy_shmem_size()));
	RequestAddinShmemSpace(pklimit_memory_shmem_size());
	RequestNamedLWLockTranche("pklimit", 1);
	pklimit_memory_shmem_request();
}

static void
shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	pklimit_queue_shmem_init();
	pklimit_registry_shmem_init();
	pklimit_purge_shmem_init();
	pklimit_stats_shmem_init();
	pklimit_policy_shmem_init();
	pklimit_memory_shmem_init();
	pklimit_lock = &(GetNamedLWLockTranche("pklimit"))->lock;
	LWLockRelease(AddinShmemInitLock);
}

void
_PG_init(void)
{
	pklimit_define_settings(process_shared_preload_libraries_in_progress);

	/* without preload there is no queue: CREATE EXTENSION still works */
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;
	pklimit_install_hooks();
	pklimit_register_static_workers(pklimit_databases);
}
