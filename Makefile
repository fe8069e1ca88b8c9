# pklimit: PGXS build, install and tests

MODULE_big = pklimit
OBJS = src/pklimit.o src/api.o src/key.o src/queue.o src/registry.o src/worker.o \
	src/check.o src/apply.o src/xact.o src/unit.o src/limit.o src/table.o src/store.o src/purge.o src/stats.o src/hooks.o \
	src/guards.o src/cron.o src/memory.o src/flush.o

EXTENSION = pklimit
# Every script is written from one source, src/sql/pklimit.sql (rules
# below); released ones are frozen.  After 0.2.0 there are only updates,
# and CREATE EXTENSION walks the chain.
DATA_built = pklimit--0.1.0.sql pklimit--0.2.0.sql pklimit--0.1.0--0.2.0.sql \
	pklimit--0.2.0--0.3.0.sql
PGFILEDESC = "pklimit - shared, exact, durable rate limits"

# every sql/*.sql, every test/isolation/specs/*.spec, every test/t/*.pl
REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --inputdir=. --outputdir=. --load-extension=pklimit

ISOLATION = $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=test/isolation \
	--load-extension=pklimit

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

# libpq: pklimit_purge_job_error() connects as pg_cron does (src/cron.c)
PG_CPPFLAGS = -I$(libpq_srcdir)
SHLIB_LINK_INTERNAL = $(libpq)

PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers \
	-Wno-sign-compare -Wno-clobbered

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Every source file includes the shared headers (PGXS tracks no header
# dependencies by itself).
$(OBJS) $(OBJS:.o=.bc): src/pklimit.h src/compat.h

# A script is the sections of src/sql/pklimit.sql whose line "--- ... ---"
# names its version, in order.
sql_script = awk -v want=$(1) '/^--- [0-9. -]+ ---$$/ { on = 0; for (i = 2; i < NF; i++) if ($$i == want) on = 1; next } on' $< >$@

pklimit--0.1.0.sql: src/sql/pklimit.sql Makefile
	$(call sql_script,0.1.0)

pklimit--0.2.0.sql: src/sql/pklimit.sql Makefile
	$(call sql_script,0.2.0)

pklimit--0.1.0--0.2.0.sql: src/sql/pklimit.sql Makefile
	$(call sql_script,0.1.0--0.2.0)

pklimit--0.2.0--0.3.0.sql: src/sql/pklimit.sql Makefile
	$(call sql_script,0.2.0--0.3.0)

# a script whose rule fails is not left half-written
.DELETE_ON_ERROR:

# The PGXN release: pklimit-<version>.zip of the committed tree (git
# archive), META.json at its top.  Refused unless the committed META.json's
# version is the control file's default_version.
dist:
	@control=$$(git show HEAD:pklimit.control | sed -n "s/^default_version = '\(.*\)'$$/\1/p"); \
	meta=$$(git show HEAD:META.json | perl -MJSON::PP -0777 -ne 'print decode_json($$_)->{version}'); \
	if [ -z "$$control" ] || [ "$$meta" != "$$control" ]; then \
		echo "make dist: META.json says version $$meta, pklimit.control default_version $$control" >&2; \
		exit 1; \
	fi; \
	rm -f pklimit-$$control.zip; \
	git archive --format=zip --prefix=pklimit-$$control/ -o pklimit-$$control.zip HEAD && \
	echo "pklimit-$$control.zip"

.PHONY: dist

# Lay out the sources as PostgreSQL's pgindent does.
indent:
	bash scripts/indent.sh

.PHONY: indent
