# attnspec: `make demo` and `make test` both create .venv and install everything pinned first.
# `make test` runs the test suite and the Examples of every docstring under src/attnspec (pytest --doctest-modules,
# configured in pyproject.toml); `make doctest` runs the docstring Examples alone.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= out/demo

.PHONY: demo test test-fast doctest bench lint clean

$(STAMP): requirements.lock requirements-nodeps.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -r requirements-nodeps.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/attnspec demo --out $(OUT)

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

doctest: $(STAMP)
	$(BIN)/python -m pytest -q src/attnspec

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) out .pytest_cache
