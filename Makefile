# pklimit: PGXS build, install and tests

MODULE_big = pklimit
OBJS = src/pklimit.o src/key.o src/store.o src/queue.o src/worker.o

EXTENSION = pklimit
DATA = pklimit--0.1.0.sql pklimit--0.1.0--0.2.0.sql pklimit--0.2.0.sql
PGFILEDESC = "pklimit - shared, exact, durable rate limits"

REGRESS = pklimit_basic pklimit_errors pklimit_settings pklimit_tenants pklimit_security pklimit_unavailable pklimit_purge pklimit_hostile
REGRESS_OPTS = --inputdir=. --outputdir=. --load-extension=pklimit

ISOLATION = concurrent_hits rollback freshness row_lock
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=test/isolation \
	--load-extension=pklimit

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers \
	-Wno-sign-compare -Wno-clobbered

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
