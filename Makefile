# Two commands on a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum requirements.txt | cut -d' ' -f1)
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup run test test-embedded test-services lint bench clean

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# The official AG-UI JavaScript client, which an integration test drives (package.json);
# reinstalled only when package.json or its lock file is newer than the installed tree.
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

setup: $(STAMP) node_modules/.package-lock.json

run: setup
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py bootstrap_demo
	DJANGO_DEBUG=$${DJANGO_DEBUG:-1} $(BIN)/python manage.py runserver $(HOST):$(PORT)

lint: setup
	$(BIN)/lint-imports
	$(BIN)/ruff check .

# The whole suite on the embedded defaults; then, when DATABASE_URL and REDIS_URL are set
# (CI sets them), again on PostgreSQL and Redis.
test: lint
	$(MAKE) --no-print-directory test-embedded
	@if [ -n "$$DATABASE_URL" ] || [ -n "$$REDIS_URL" ]; then $(MAKE) --no-print-directory test-services; \
	else echo "DATABASE_URL/REDIS_URL not set: skipped the PostgreSQL + Redis pass"; fi

test-embedded: setup
	env -u DATABASE_URL -u REDIS_URL $(BIN)/python -m pytest -q

test-services: setup
	@test -n "$$DATABASE_URL" || (echo "DATABASE_URL must be set for test-services" && exit 2)
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python bench/turns.py
	$(BIN)/python bench/context.py
	$(BIN)/python bench/recall.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/stream.py

clean:
	rm -rf $(VENV) var/*.sqlite3* var/test-*
