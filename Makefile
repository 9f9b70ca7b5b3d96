# The few commands a contributor needs. Every target sets up what it uses, so a fresh
# clone needs only `make bench` or `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Where the loom model tests live; each is a `tests/loom_*.rs` integration test.
LOOM_TESTS := $(patsubst tests/%.rs,%,$(wildcard tests/loom_*.rs))

.PHONY: bench test develop test-rust test-loom test-python lint stress clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Build the extension (release) into the venv with every test and bench dependency.
develop: $(PY)
	$(PY) -m pip install --quiet -e '.[test,bench]'

bench: develop
	$(PY) -m ctxlock bench

test: develop lint test-rust test-loom test-python

lint:
	cargo fmt --check
	cargo clippy --all-targets --quiet -- -D warnings
	cargo clippy --all-targets --features python --quiet -- -D warnings
	$(PY) -m ruff check python tests benches
	$(PY) -m ruff format --check python tests benches
	$(PY) -m mypy
	$(PY) -m mypy.stubtest ctxlock._ctxlock --allowlist .stubtest-allowlist

test-rust:
	cargo test --quiet
	cargo bench --quiet --bench core -- --test

test-loom:
ifneq ($(LOOM_TESTS),)
	RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --quiet $(addprefix --test ,$(LOOM_TESTS))
endif

test-python:
	$(PY) -m pytest

# Long randomized runs on demand: `make stress STRESS_SECONDS=600`.
STRESS_SECONDS ?= 120
stress: develop
	CTXLOCK_STRESS_SECONDS=$(STRESS_SECONDS) $(PY) -m pytest -m stress --timeout=0

clean:
	rm -rf $(VENV) target
