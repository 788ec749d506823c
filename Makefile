# The two commands: `make demo` and `make test`. Each creates its virtualenvs and installs
# what it needs; nothing else is required.
#
# .venv      the newest Python >= 3.12 found, the newest Django (6.x), hiredis: lint and
#            types, the docs as make test checks them, and the first leg of the suite
# .venv-lts  the oldest Python >= 3.10 found, Django 5.2 LTS with the django-tasks
#            backport, redis-py's pure-Python parser: the second leg
# Without a Python >= 3.12, .venv gets the newest Python >= 3.10 and Django 5.2, and the
# suite runs once on it (the second leg would repeat it).
PYTHON ?= $(shell tools/find-python 12 || tools/find-python 10)
PYTHON_LTS ?= $(shell tools/find-python 10 --oldest)
VENV := .venv
BIN := $(VENV)/bin
LTS := .venv-lts
LTS_BIN := $(LTS)/bin
# .venv-oldest  the newest Python >= 3.12, the oldest redis-py allowed and Django 6.0
OLDEST := .venv-oldest
OLDEST_BIN := $(OLDEST)/bin
# .venv-dist  build and twine only: make dist
DIST := .venv-dist
DIST_BIN := $(DIST)/bin
# .venv-demo  the app with its bundled server and hiredis, nothing else: make demo
DEMO := .venv-demo
DEMO_BIN := $(DEMO)/bin
# .venv-docs  the app and Sphinx: make docs
DOCS := .venv-docs
DOCS_BIN := $(DOCS)/bin
# .venv-newest  as .venv, but with the newest release of everything: the newest-leg of
# make test, which reports what a new release breaks before the lock takes it
NEWEST := .venv-newest
NEWEST_BIN := $(NEWEST)/bin

# Each virtualenv installs exactly the versions locked in requirements/<env>.txt (pip
# constraints: the project's version ranges still decide what is allowed), so a fresh
# clone's make test gives the result it gave on the day it landed. make lock refreshes
# them on purpose, from the newest releases the ranges allow. Library users install
# from the ranges in pyproject.toml; the lock is the developers' and CI's only.
LOCKS := requirements
DEV_INSTALL := -e '.[embedded,hiredis]' --group dev --group docs
LTS_INSTALL := -e '.[embedded,tasks-backport]' --group test 'django>=5.2,<6'
OLDEST_INSTALL := -e '.[embedded]' --group test 'redis==6.4.*' 'django==6.0.*'
DIST_INSTALL := --group dist
DEMO_INSTALL := -e '.[embedded,hiredis]'
DOCS_INSTALL := -e '.[embedded]' --group docs

.PHONY: demo test lint docs docs-check dist browser gettext postgres lock clean leg-1 \
	leg-1-proofs leg-1-others leg-1-cluster leg-1-cluster-proofs leg-1-cluster-others \
	leg-1-long leg-1-waits leg-1-fan-ins legacy-leg valkey-leg valkey-proofs valkey-others \
	valkey-cluster-leg oldest-leg newest-leg

# $(call venv,FOLDER,PYTHON,WHAT TO INSTALL,LOCK FILE or empty for the newest releases)
define venv
	@test -n "$(2)" || { echo "No Python >= 3.10 found; install one or set PYTHON=..."; exit 1; }
	rm -rf $(1)
	$(2) -m venv $(1)
	$(1)/bin/python -m pip install --quiet $(if $(4),-c $(4)) --upgrade pip
	$(1)/bin/python -m pip install --quiet $(if $(4),-c $(4)) $(3)
endef

$(VENV)/.installed: pyproject.toml Makefile $(LOCKS)/dev.txt
	$(call venv,$(VENV),$(PYTHON),$(DEV_INSTALL),$(LOCKS)/dev.txt)
	@touch $@

# The demo's and the docs' take the versions of the dev lock, of which they are a part.
$(DEMO)/.installed: pyproject.toml Makefile $(LOCKS)/dev.txt
	$(call venv,$(DEMO),$(PYTHON),$(DEMO_INSTALL),$(LOCKS)/dev.txt)
	@touch $@

$(DOCS)/.installed: pyproject.toml Makefile $(LOCKS)/dev.txt
	$(call venv,$(DOCS),$(PYTHON),$(DOCS_INSTALL),$(LOCKS)/dev.txt)
	@touch $@

$(LTS)/.installed: pyproject.toml Makefile $(LOCKS)/lts.txt
	$(call venv,$(LTS),$(PYTHON_LTS),$(LTS_INSTALL),$(LOCKS)/lts.txt)
	@touch $@

$(OLDEST)/.installed: pyproject.toml Makefile $(LOCKS)/oldest.txt
	$(call venv,$(OLDEST),$(PYTHON),$(OLDEST_INSTALL),$(LOCKS)/oldest.txt)
	@touch $@

# Always rebuilt: its point is whatever was released since the last run.
$(NEWEST)/.installed: FORCE
	$(call venv,$(NEWEST),$(PYTHON),$(DEV_INSTALL),)
	@touch $@

FORCE:

# Refresh the lock files from the newest releases that pyproject.toml allows, in fresh
# virtualenvs of their own (the working ones are left alone). Review the diff, then run
# make test, which rebuilds every virtualenv from the new locks.
lock:
	@mkdir -p $(LOCKS)
	$(call venv,.venv-lock,$(PYTHON),$(DEV_INSTALL),)
	.venv-lock/bin/python -m pip freeze --all --exclude-editable > $(LOCKS)/dev.txt
	$(call venv,.venv-lock,$(PYTHON_LTS),$(LTS_INSTALL),)
	.venv-lock/bin/python -m pip freeze --all --exclude-editable > $(LOCKS)/lts.txt
	$(call venv,.venv-lock,$(PYTHON),$(OLDEST_INSTALL),)
	.venv-lock/bin/python -m pip freeze --all --exclude-editable > $(LOCKS)/oldest.txt
	$(call venv,.venv-lock,$(PYTHON),$(DIST_INSTALL),)
	.venv-lock/bin/python -m pip freeze --all > $(LOCKS)/dist.txt
	rm -rf .venv-lock
	@git diff --stat -- $(LOCKS)

demo: $(DEMO)/.installed
	$(DEMO_BIN)/python manage.py demo

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site, into docs/_build/html. Warnings are errors: a broken link
# between pages, a reference that leads nowhere, a module that does not import. make
# test checks the same build with .venv, which has the docs group too (docs-check).
SPHINX_BUILD := sphinx-build -W --keep-going -n -b html docs docs/_build/html
docs: $(DOCS)/.installed
	$(DOCS_BIN)/$(SPHINX_BUILD)

docs-check: $(VENV)/.installed
	$(BIN)/$(SPHINX_BUILD)

# The release files: the sdist and the wheel (built from that sdist) into dist/, checked
# as the package index will read them. Uploading is a separate step (CONTRIBUTING.md).
# Building takes only build and twine (the dist group), in a virtualenv of their own.
$(DIST)/.installed: pyproject.toml Makefile $(LOCKS)/dist.txt
	$(call venv,$(DIST),$(PYTHON),$(DIST_INSTALL),$(LOCKS)/dist.txt)
	@touch $@

dist: $(DIST)/.installed
	rm -rf dist
	$(DIST_BIN)/python -m build --outdir dist
	$(DIST_BIN)/twine check --strict dist/*

# The browser tests drive Chromium through chromedriver. When they are missing and this
# runs as root where apt-get exists (CI), install Debian's; otherwise those tests are
# skipped and say why. This step never fails the build.
browser:
	@if [ -n "$$CHROME_BIN$$CHROMEDRIVER" ] || { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing chromium and chromium-driver for the browser tests"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } \
			|| echo "Could not install chromium; the browser tests will be skipped."; \
	else echo "No chromium and chromium-driver, and no apt-get as root to install them: the browser tests will be skipped."; fi

# The translation tests extract the marked texts with GNU gettext. When it is missing
# and this runs as root where apt-get exists (CI), install Debian's; otherwise those
# tests are skipped and say why. This step never fails the build.
gettext:
	@if command -v xgettext >/dev/null 2>&1 && command -v msgfmt >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing gettext for the translation tests"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gettext >/dev/null; } \
			|| echo "Could not install gettext; the translation tests will be skipped."; \
	else echo "No GNU gettext, and no apt-get as root to install it: the translation tests will be skipped."; fi

# The tests of thread slots and the ORM start a PostgreSQL server of their own (Debian's
# server programs, see tests/postgres.py). When they are missing and this runs as root
# where apt-get exists (CI), install Debian's without creating or starting its default
# cluster; otherwise those tests are skipped and say why. This step never fails the build.
postgres:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing PostgreSQL for the tests of threads and the ORM"; \
		mkdir -p /etc/postgresql-common && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; } \
			|| echo "Could not install postgresql; the PostgreSQL tests will be skipped."; \
	else echo "No PostgreSQL server programs, and no apt-get as root to install them: the PostgreSQL tests will be skipped."; fi

# Lint, types, the docs and the legs, in three lanes (make -j3), each lane's jobs one
# after the other (LANES orders them), each job's output printed whole when it ends. On
# 2 cores the suite mostly waits (its proofs sleep, hold leases, wait on processes), but
# its timing-bound proofs, the tests marked processes, starve when two passes full of
# them share the cores (make -j3 of leg 1's passes failed a run in two: a rate's spacing,
# a task's command count, a workflow's memory). So each leg's processes tests are a pass
# of their own, and those passes run one after the other in the first lane. The second
# runs the legs' other tests; the third what mostly sleeps (python-redis-lock's suite,
# minutes of its own sleeps, and the schedules proof, 3 minutes of ticks) or keeps one
# core busy for a minute (lint, types, the docs), then leg 2, whose proofs with
# processes are few (the smoke tests and the failover). Each leg is chosen by each
# test's purpose (tests/conftest.py's PURPOSE; CONTRIBUTING.md has the table); each pass
# with coverage writes a file of its own, combined into one report.
LANE_PROOFS := leg-1-proofs leg-1-cluster-proofs valkey-proofs newest-leg
LANE_OTHERS := leg-1-others leg-1-cluster-others valkey-others valkey-cluster-leg \
	leg-1-fan-ins oldest-leg
LANE_WAITS := leg-1-waits lint docs-check legacy-leg
test: browser gettext postgres
	rm -f .coverage .coverage.*
	@$(MAKE) --no-print-directory -j3 --output-sync=target LANES=1 $(LANE_PROOFS) \
		$(LANE_OTHERS) $(LANE_WAITS)
	$(BIN)/coverage combine $(COVERAGE_FILES)
	$(BIN)/coverage report

ifeq ($(LANES),1)
leg-1-cluster-proofs: | leg-1-proofs
valkey-proofs: | leg-1-cluster-proofs
newest-leg: | valkey-proofs
leg-1-cluster-others: | leg-1-others
valkey-others: | leg-1-cluster-others
valkey-cluster-leg: | valkey-others
leg-1-fan-ins: | valkey-cluster-leg
oldest-leg: | leg-1-fan-ins
lint: | leg-1-waits
docs-check: | lint
legacy-leg: | docs-check
endif

# Leg 1: the newest Django, hiredis, Redis 6.2: everything, with coverage; its proofs
# with processes and its other tests in two passes.
leg-1: leg-1-proofs leg-1-others

leg-1-proofs: $(VENV)/.installed
	$(BIN)/python -c 'import django, redis.utils as u; print("Leg 1: Django", django.get_version(), "hiredis" if u.HIREDIS_AVAILABLE else "pure-Python parser")'
	COVERAGE_FILE=.coverage.proofs $(BIN)/pytest --cov --cov-report= \
		-m 'processes and not long and not once'

leg-1-others: $(VENV)/.installed
	@echo "Leg 1: the tests without processes"
	COVERAGE_FILE=.coverage.others $(BIN)/pytest --cov --cov-report= \
		-m 'not processes and not long and not once'

# Leg 1 on a 3-master Redis Cluster: all but static, browser, once and long.
leg-1-cluster: leg-1-cluster-proofs leg-1-cluster-others

leg-1-cluster-proofs: $(VENV)/.installed
	@echo "Leg 1 on a 3-master Redis Cluster: the proofs with processes"
	COVERAGE_FILE=.coverage.cluster-proofs RC_TEST_CLUSTER=1 $(BIN)/pytest --cov \
		--cov-report= -m 'processes and not static and not browser and not once and not long'

leg-1-cluster-others: $(VENV)/.installed
	@echo "Leg 1 on a 3-master Redis Cluster: the tests without processes"
	COVERAGE_FILE=.coverage.cluster-others RC_TEST_CLUSTER=1 $(BIN)/pytest --cov \
		--cov-report= -m 'not processes and not static and not browser and not once and not long'

# Leg 1's tests that run for minutes (marked long; RC_TEST_LONG set) and python-redis-lock's
# suite (marked once), each on a single server of its own: the ones that mostly sleep
# (python-redis-lock's suite, with coverage as in the other passes, and the schedules
# proof under kill -9), and the ones that keep a core busy (the fan-ins of 8,000 steps).
leg-1-long: leg-1-waits leg-1-fan-ins

leg-1-waits: $(VENV)/.installed
	@echo "Leg 1: python-redis-lock's suite and the long proof that waits"
	COVERAGE_FILE=.coverage.waits $(BIN)/pytest --cov --cov-report= -m once
	RC_TEST_LONG=1 $(BIN)/pytest -m 'long and not server'

leg-1-fan-ins: $(VENV)/.installed
	@echo "Leg 1: the long tests on the server"
	RC_TEST_LONG=1 $(BIN)/pytest -m 'long and server'

# Leg 2: Django 5.2 LTS with the backport, the oldest Python, redis-py's pure-Python
# parser: the Django and client tests, and a worker's smoke tests.
legacy-leg: $(VENV)/.installed
	@if ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
		echo "No Python >= 3.12 here, so Django 6 cannot run: the suite ran on Django 5.2 only."; \
	else \
		$(MAKE) --no-print-directory $(LTS)/.installed && \
		$(LTS_BIN)/python -c 'import django, redis.utils as u; print("Leg 2: Django", django.get_version(), "hiredis" if u.HIREDIS_AVAILABLE else "pure-Python parser")' && \
		$(LTS_BIN)/pytest -m 'django or client or smoke' && \
		RC_TEST_CLUSTER=1 $(LTS_BIN)/pytest -m 'client or smoke'; \
	fi

# Leg 3: Valkey 8.1, a current server, instead of the bundled Redis 6.2: the components
# on the server, and the proofs with processes, on a single server. On the cluster, the
# components on the server, and the failover of a cluster's master (Valkey's own cluster
# bus promotes the replica). The other proofs with processes are not repeated there:
# what a cluster adds to them (the cluster client's routing, slots, hash tags, MOVED) is
# redis-py's and ours, not the server's, and leg 1's cluster pass proves it on Redis 6.2;
# what Valkey could change in it, its commands and scripts on a cluster, the server
# tests run on Valkey's cluster.
valkey-leg: valkey-proofs valkey-others valkey-cluster-leg

valkey-proofs: $(VENV)/.installed
	@echo "Leg 3: Valkey 8.1, the proofs with processes"
	RC_TEST_SERVER=valkey $(BIN)/pytest -m processes

valkey-others: $(VENV)/.installed
	@echo "Leg 3: Valkey 8.1, the components on the server"
	RC_TEST_SERVER=valkey $(BIN)/pytest -m 'server and not processes'

valkey-cluster-leg: $(VENV)/.installed
	@echo "Leg 3: Valkey 8.1 on a 3-master cluster"
	RC_TEST_SERVER=valkey RC_TEST_CLUSTER=1 $(BIN)/pytest -m 'server and not processes'
	RC_TEST_SERVER=valkey RC_TEST_CLUSTER=1 $(BIN)/pytest tests/test_failover.py

# Leg 4: the oldest redis-py allowed, with Django 6.0: the client tests, redis-py's lock
# suite, Django's tasks suite, and a worker's smoke tests.
oldest-leg: $(VENV)/.installed
	@if ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
		echo "No Python >= 3.12 here, so Django 6.0 cannot run: leg 4 skipped."; \
	else \
		$(MAKE) --no-print-directory $(OLDEST)/.installed && \
		$(OLDEST_BIN)/python -c 'import django, redis; print("Leg 4: Django", django.get_version(), "redis-py", redis.__version__)' && \
		$(OLDEST_BIN)/pytest -m '(client or peers or smoke) and not once' && \
		RC_TEST_CLUSTER=1 $(OLDEST_BIN)/pytest -m 'client or smoke'; \
	fi

# The newest leg: the newest release of every dependency (what the lock will take at the
# next make lock), linted, type-checked and run on the client, peers' and smoke tests. It
# reports and never fails the build: a new release's breakage is printed, named and
# fixed on purpose, not found by a fresh clone on the day of an unrelated change.
newest-leg: $(VENV)/.installed
	@if ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
		echo "No Python >= 3.12 here: the newest leg skipped."; \
	else \
		failed=""; \
		$(MAKE) --no-print-directory $(NEWEST)/.installed || failed="$$failed install"; \
		if [ -z "$$failed" ]; then \
			echo "Newest leg: what differs from $(LOCKS)/dev.txt:"; \
			$(NEWEST_BIN)/python -m pip freeze --all --exclude-editable | diff $(LOCKS)/dev.txt - | grep '^[<>]' || echo "  nothing"; \
			$(NEWEST_BIN)/ruff check . || failed="$$failed ruff"; \
			$(NEWEST_BIN)/mypy || failed="$$failed mypy"; \
			$(NEWEST_BIN)/pytest -m '(client or peers or smoke) and not once' || failed="$$failed pytest"; \
		fi; \
		if [ -n "$$failed" ]; then \
			echo "NEWEST RELEASES BREAK:$$failed (reported, not failing the build; see above)"; \
		else echo "Newest leg: the newest releases pass."; fi; \
	fi

clean:
	rm -rf $(VENV) $(LTS) $(OLDEST) $(DIST) $(DEMO) $(DOCS) $(NEWEST) .venv-lock dist .coverage .coverage.* .mypy_cache .pytest_cache .ruff_cache docs/_build
