# pklimit: PGXS build, install and tests

MODULE_big = pklimit
OBJS = src/pklimit.o src/settings.o src/api.o src/check.o src/key.o \
	src/queue.o src/shares.o src/registry.o src/worker.o src/entry.o \
	src/apply.o src/unit.o src/xact.o src/limit.o src/table.o src/store.o \
	src/purge.o src/stats.o src/statsfuncs.o src/hooks.o src/guards.o \
	src/cron.o src/citus.o src/policy.o src/calendar.o src/lease.o src/memory/keys.o src/memory/databases.o src/memory/inout.o \
	src/memory/flush.o src/memory/readin.o src/memory/batch.o

EXTENSION = pklimit
# Released scripts are committed as released and frozen; the update being
# written is built from its source in src/sql/ (rule below).  After 0.2.0
# there are only updates, and CREATE EXTENSION walks the chain.
DATA = pklimit--0.1.0.sql pklimit--0.2.0.sql pklimit--0.1.0--0.2.0.sql \
	pklimit--0.2.0--0.3.0.sql
DATA_built = pklimit--0.3.0--0.4.0.sql
PGFILEDESC = "pklimit - shared, exact, durable rate limits"

# every sql/*.sql, every test/isolation/specs/*.spec, every test/t/*.pl
REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --inputdir=. --outputdir=. --load-extension=pklimit

ISOLATION = $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=test/isolation \
	--load-extension=pklimit

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

# src/'s headers for the memory path's files in src/memory/; libpq:
# pklimit_purge_job_error() connects as pg_cron does (src/cron.c)
PG_CPPFLAGS = -I$(srcdir)/src -I$(libpq_srcdir)
SHLIB_LINK_INTERNAL = $(libpq)

PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers \
	-Wno-sign-compare -Wno-clobbered

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS tracks no header dependencies by itself: every object depends on
# src/'s headers, and the memory path's (src/memory/) on its private one too.
MEMORY_OBJS = $(filter src/memory/%,$(OBJS))
$(OBJS) $(OBJS:.o=.bc): $(wildcard src/*.h)
$(MEMORY_OBJS) $(MEMORY_OBJS:.o=.bc): src/memory/memory_private.h

# An update is its source in src/sql/ with each line "--@include <file>"
# replaced by that fragment of src/sql/ (src/sql/guard.sql and the like,
# which every update shares).
SQL_FRAGMENTS = $(wildcard src/sql/[a-z]*.sql)

pklimit--0.3.0--0.4.0.sql: src/sql/pklimit--0.3.0--0.4.0.sql $(SQL_FRAGMENTS) Makefile
	awk '/^--@include [a-z_]+\.sql$$/ { f = "src/sql/" $$2; while ((getline l < f) > 0) print l; \
		if (close(f) != 0) exit 1; next } { print }' $< >$@

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
