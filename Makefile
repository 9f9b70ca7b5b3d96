# The few commands a contributor needs. Every target sets up what it uses, so a fresh
# clone needs only `make bench` or `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Where the loom model tests live; each is a `tests/loom_*.rs` integration test.
LOOM_TESTS := $(patsubst tests/%.rs,%,$(wildcard tests/loom_*.rs))

.PHONY: bench test develop postgres test-rust test-loom test-python lint stress clean \
	sanitize sanitize-miri sanitize-tsan test-cpython

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Build the extension (release) into the venv with every test and bench dependency.
develop: $(PY)
	$(PY) -m pip install --quiet -e '.[test,bench]'

# The report on this venv's CPython, with the interpreter rows also on CPython 3.14 and
# free-threaded 3.14t side by side (their venvs made by scripts/cpython-venv.sh).
bench: develop postgres
	scripts/cpython-venv.sh 3.14 >/dev/null
	scripts/cpython-venv.sh 3.14t >/dev/null
	$(PY) -m ctxlock bench --pythons .venv-3.14/bin/python,.venv-3.14t/bin/python

test: develop postgres lint test-rust test-loom test-python sanitize

# PostgreSQL and pgbouncer for the postgres scope's tests, which start a server of their own
# (installed with apt-get when missing and run as root; otherwise only says what is missing).
postgres:
	scripts/ensure-postgres.sh

lint:
	cargo fmt --check
	# The modules of src/core and of src/python form no cycle (each a DAG of layers).
	$(PYTHON) scripts/check-layers.py
	cargo clippy --all-targets --quiet -- -D warnings
	cargo clippy --all-targets --features python --quiet -- -D warnings
	# The free-threaded build (Py_GIL_DISABLED), checked without an interpreter.
	PYO3_CONFIG_FILE=$(CURDIR)/ci/pyo3-free-threaded.cfg \
		cargo clippy --all-targets --features python --target-dir target/free-threaded --quiet -- -D warnings
	$(PY) -m ruff check python tests benches scripts
	$(PY) -m ruff format --check python tests benches scripts
	$(PY) -m mypy
	# The awaitables' types against asyncio's APIs (create_task, TaskGroup).
	$(PY) -m mypy tests/typecheck_asyncio.py
	$(PY) -m mypy.stubtest ctxlock._ctxlock --allowlist .stubtest-allowlist

test-rust:
	cargo test --quiet
	cargo bench --quiet --bench core -- --test

test-loom:
ifneq ($(LOOM_TESTS),)
	RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --quiet $(addprefix --test ,$(LOOM_TESTS))
endif

test-python: postgres
	$(PY) -m pytest

# The pytest suite on CPython 3.14 and free-threaded 3.14t, built from source once per
# machine and cached (scripts/cpython.sh); on 3.14t also the GIL check and the stress tests
# with 4 and 8 threads. CI runs it after `make test`.
test-cpython:
	scripts/test-cpython.sh

# Long randomized runs on demand: `make stress STRESS_SECONDS=600`.
STRESS_SECONDS ?= 120
stress: develop
	CTXLOCK_STRESS_SECONDS=$(STRESS_SECONDS) $(PY) -m pytest -m stress --timeout=0

clean:
	rm -rf $(VENV) .venv-3.14 .venv-3.14t target

# Sanitizers: the core's unit and integration tests under Miri and ThreadSanitizer.
# Both need a nightly toolchain with rust-src; a missing piece skips its step with a
# message and never fails. RUSTUP_AUTO_INSTALL=0: probing must not download a toolchain.
NIGHTLY_TOOLCHAIN ?= nightly
NIGHTLY   = RUSTUP_AUTO_INSTALL=0 cargo +$(NIGHTLY_TOOLCHAIN)
RUST_SRC  = $$(RUSTUP_AUTO_INSTALL=0 rustc +$(NIGHTLY_TOOLCHAIN) --print sysroot 2>/dev/null)/lib/rustlib/src/rust/library
HOST      = $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
# Miri's schedule (and proptest case) seeds: each seed is one more run of each test.
MIRI_SEEDS ?= 0..4
# Never under Miri. Thousands of contended rounds: minutes each, and past the tests' 60 s
# watchdog, which counts Miri's virtual clock. go_port's test_lock cancels a token with a
# 100 µs deadline after creating it; Miri's clock lets the deadline win first. The five
# "woken to compete" tests need an unlock within FAIR_AFTER (1 ms) of a waiter queueing,
# which Miri's clock never allows (loom's models cover that path instead).
MIRI_SKIP := test_mutual_exclusion_under_threads test_grant_cancel_race_never_double_holds \
	test_task_abandon_unlock_race_decides_exactly_once \
	test_interrupt_grant_race_leaves_the_lock_consistent \
	test_exclusive_excludes_readers_and_writers test_grant_abandon_race_with_readers_behind \
	test_a_waiter_woken_to_compete_later_keeps_its_place_and_age \
	test_a_waiter_woken_to_compete_at_once_keeps_its_age \
	test_a_competing_waiter_is_handed_the_slot_once_it_waited_long_enough \
	test_a_competing_waiter_past_fair_after_is_handed_the_slot_after_another_waiter_left \
	test_a_scoped_hold_ended_while_a_competitor_is_away_frees_the_slot
# Run with seed 0 only: 300 grant/timeout races take about 30 s under Miri.
MIRI_ONE_SEED := test_timeout_grant_race_never_leaks_the_slot
# Tests that start the timer thread (a token with a deadline, go_port's all do, or a waiter
# woken to compete later, which the timer marks once it has waited FAIR_AFTER) or callback
# runner threads (a deadline's user callbacks): they outlive the test, so Miri runs them
# without its leak check. Add new ones here.
MIRI_TIMER := core::cancel::tests::deadlines_cancel_through_the_timer \
	core::cancel::tests::expire_if_due_walks_up test_token_deadline_cancels_with_its_reason \
	test_lock test_sharable_lock test_unlock \
	core::runner::tests::a_blocked_job_never_delays_the_next \
	test_a_deep_chain_is_cancelled_by_a_call test_a_deep_chain_is_cancelled_by_its_deadline \
	test_a_deep_chain_is_freed_from_either_end test_tokens_with_nothing_registered_are_freed \
	test_a_blocked_user_callback_delays_no_other_deadline \
	test_a_blocked_user_callback_delays_no_flag_waiter_or_release \
	test_callbacks_of_unreferenced_tokens_still_run \
	test_a_thread_wait_dropped_after_retry_gives_up \
	test_a_thread_wait_dropped_after_retry_passes_on_a_grant_it_never_saw
MIRI_ENV := -Zmiri-env-set=PROPTEST_CASES=1 -Zmiri-env-set=PROPTEST_DISABLE_FAILURE_PERSISTENCE=1

# Both sanitizers; see the two targets below.
sanitize: sanitize-miri sanitize-tsan

# Miri (UB, data races, leaks) on every test but the lists above, over MIRI_SEEDS.
sanitize-miri:
	@if ! $(NIGHTLY) miri --version >/dev/null 2>&1; then \
		echo "skipping Miri: no nightly toolchain with miri"; \
	elif [ ! -d "$(RUST_SRC)" ]; then \
		echo "skipping Miri: $(NIGHTLY_TOOLCHAIN) has no rust-src (rustup +$(NIGHTLY_TOOLCHAIN) component add rust-src)"; \
	else set -ex; \
		MIRIFLAGS="-Zmiri-many-seeds=$(MIRI_SEEDS) $(MIRI_ENV)" $(NIGHTLY) miri test --tests -- \
			--exact $(foreach t,$(MIRI_SKIP) $(MIRI_ONE_SEED) $(MIRI_TIMER),--skip $(t)); \
		MIRIFLAGS="-Zmiri-many-seeds=$(MIRI_SEEDS) -Zmiri-ignore-leaks" \
			$(NIGHTLY) miri test --lib --test lock --test go_port --test tokens -- --exact $(MIRI_TIMER); \
		MIRIFLAGS="$(MIRI_ENV)" $(NIGHTLY) miri test --test lock -- --exact $(MIRI_ONE_SEED); \
	fi

# ThreadSanitizer on every unit and integration test, std rebuilt instrumented (build-std).
sanitize-tsan:
	@if ! $(NIGHTLY) --version >/dev/null 2>&1; then \
		echo "skipping ThreadSanitizer: no nightly toolchain"; \
	elif [ ! -d "$(RUST_SRC)" ]; then \
		echo "skipping ThreadSanitizer: $(NIGHTLY_TOOLCHAIN) has no rust-src (rustup +$(NIGHTLY_TOOLCHAIN) component add rust-src)"; \
	else set -ex; \
		RUSTFLAGS="-Zsanitizer=thread" $(NIGHTLY) test -Zbuild-std --target $(HOST) \
			--target-dir target/tsan --lib --tests; \
	fi
