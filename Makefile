# Two commands on a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-nodeps.txt | cksum | cut -d' ' -f1)
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup js-client run test test-serial test-fast test-embedded test-services lint fuzz bench bench-peers clean

$(STAMP): requirements.txt requirements-nodeps.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -r requirements-nodeps.txt
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# The official AG-UI JavaScript client, which one integration test drives (package.json);
# reinstalled only when package.json or its lock file is newer than the installed tree.
# Only `make test` wants it, and only when Node.js and npm are there: without them that one
# test is skipped and says why. `make run` never needs Node.
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

js-client:
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory node_modules/.package-lock.json; \
	else echo "Node.js/npm not found: tests/integration/test_agui_client.py (the official AG-UI JavaScript client) will be skipped; install Node.js 20+ and npm to run it"; fi

setup: $(STAMP)

# The port is checked first: the development server would log "Address already in use" and
# keep running without serving.
run: setup
	@$(BIN)/python -m agentsite.portcheck $(HOST) $(PORT)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py bootstrap_demo --host $(HOST) --port $(PORT)
	DJANGO_DEBUG=$${DJANGO_DEBUG:-1} $(BIN)/python manage.py runserver $(HOST):$(PORT)

# The production topology of docs/operations.md: HAProxy on HOST:PORT in front of two Daphne
# processes (PORT+1, PORT+2), two Celery workers, on DATABASE_URL / REDIS_URL (default: the
# local PostgreSQL database `agentsite` and Redis database 0), run by honcho from the
# Procfile. Needs Debian's haproxy (`apt-get install -y haproxy`). Ctrl-C stops everything.
stack: setup
	$(BIN)/python deploy/stack.py --demo --host $(HOST) --port $(PORT)

lint: setup
	$(BIN)/lint-imports
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/deadcode.py
	$(BIN)/mypy

# The whole suite on the embedded defaults; then, when DATABASE_URL and REDIS_URL are set
# (CI sets them), again on PostgreSQL and Redis. Each pass runs on WORKERS pytest-xdist
# processes, a test file per process at a time: each worker has its own test database
# (pytest-django's test_<name>_gwN), Redis databases (REDIS_URL's database B: B+1+2N and
# B+2+2N, tests/conftest.py) and temporary folders. On a quiet 2-core machine, a fresh clone
# runs both passes in about 13 min (embedded 5.2 + PostgreSQL/Redis 7.0 min of pytest, plus
# set-up and lint), against 29.5 min one process at a time (11.9 + 17.5). The slowest tests
# are listed at the end of each pass.
# `make test-serial` runs the same passes in one process.
WORKERS ?= 2
PYTEST_PARALLEL := -n $(WORKERS) --dist loadfile --durations=10
test: lint
	$(MAKE) --no-print-directory test-embedded
	@if [ -n "$$DATABASE_URL" ] || [ -n "$$REDIS_URL" ]; then $(MAKE) --no-print-directory test-services; \
	else echo "DATABASE_URL/REDIS_URL not set: skipped the PostgreSQL + Redis pass"; fi

test-serial: lint
	$(MAKE) --no-print-directory test-embedded PYTEST_PARALLEL=
	@if [ -n "$$DATABASE_URL" ] || [ -n "$$REDIS_URL" ]; then $(MAKE) --no-print-directory test-services PYTEST_PARALLEL=; \
	else echo "DATABASE_URL/REDIS_URL not set: skipped the PostgreSQL + Redis pass"; fi

# The fast tier: the tests that need no database, no live server and no other process
# (tests/conftest.py, --fast), on the embedded defaults, on two xdist workers: 905 tests in
# 43-54 s wall on a quiet 2-core machine (63 s on one worker).
test-fast: setup
	env -u DATABASE_URL -u REDIS_URL $(BIN)/python -m pytest -q --fast -n 2

test-embedded: setup js-client
	env -u DATABASE_URL -u REDIS_URL $(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

test-services: setup js-client
	@test -n "$$DATABASE_URL" || (echo "DATABASE_URL must be set for test-services" && exit 2)
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

# The fuzz tests of tests/security with many more generated cases than `make test` runs
# (FUZZ_MAX_EXAMPLES per REST operation and per protocol property).
FUZZ_MAX_EXAMPLES ?= 200
fuzz: setup
	FUZZ_MAX_EXAMPLES=$(FUZZ_MAX_EXAMPLES) $(BIN)/python -m pytest -q tests/security/test_fuzz_rest.py tests/security/test_fuzz_protocols.py

bench: setup
	$(BIN)/python bench/turns.py
	$(BIN)/python bench/context.py
	$(BIN)/python bench/recall.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/stream.py
	$(BIN)/python bench/load.py $(BENCH_LOAD_ARGS)

# Agentsite side by side with Google ADK, LangGraph and the OpenAI Agents SDK (bench/README.md,
# "Peers"). The peers live in their own venv, rebuilt when bench/requirements-peers.txt changes;
# BENCH_PEERS_ARGS passes options to bench/peers/run.py (e.g. --turns 50).
PEERS_VENV := bench/.venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed-$(shell cksum bench/requirements-peers.txt | cut -d' ' -f1)

$(PEERS_STAMP): bench/requirements-peers.txt
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install -q -r bench/requirements-peers.txt
	rm -f $(PEERS_VENV)/.installed-*
	touch $(PEERS_STAMP)

bench-peers: $(STAMP) $(PEERS_STAMP)
	$(BIN)/python bench/peers/run.py $(BENCH_PEERS_ARGS)

# The interop suite (issue 25): LangChain, LangGraph, the OpenAI Agents SDK and Google ADK,
# from their own pinned venv (tests/interop/.venv, rebuilt when tests/interop/requirements.txt
# changes), drive a live server. `make test` runs it too: tests/interop/test_interop.py builds
# the same venv when it is missing and skips, saying why, when it cannot (no PyPI).
INTEROP_VENV := tests/interop/.venv
INTEROP_STAMP := $(INTEROP_VENV)/.installed-$(shell sha256sum tests/interop/requirements.txt | cut -c1-16)

$(INTEROP_STAMP): tests/interop/requirements.txt
	$(PYTHON) -m venv --clear $(INTEROP_VENV)
	$(INTEROP_VENV)/bin/python -m pip install -q -r tests/interop/requirements.txt
	touch $(INTEROP_STAMP)

test-interop: setup $(INTEROP_STAMP)
	env -u DATABASE_URL -u REDIS_URL $(BIN)/python -m pytest -q tests/interop

clean:
	rm -rf $(VENV) var/*.sqlite3* var/test-*
