#!/usr/bin/env bash
# The pytest suite on CPython 3.14 and free-threaded 3.14t (built by scripts/cpython.sh,
# cached), each in its own virtualenv (.venv-3.14, .venv-3.14t) and cargo target dir, made
# by scripts/cpython-venv.sh.
# On 3.14t it also checks that importing ctxlock leaves the GIL off and runs the stress
# tests with 4 and 8 threads. Usage: scripts/test-cpython.sh [3.14|3.14t]...
set -euo pipefail
cd "$(dirname "$0")/.."
STRESS_SECONDS=${STRESS_SECONDS:-5}

[ $# -gt 0 ] || set -- 3.14 3.14t
for flavour in "$@"; do
    # The venv (.venv-$flavour) with ctxlock installed, made or brought up to date.
    py=$(scripts/cpython-venv.sh "$flavour")
    if [ "$flavour" = 3.14t ]; then
        "$py" -c 'import sys, ctxlock
assert not sys._is_gil_enabled(), "importing ctxlock turned the GIL on"
print("GIL off after import ctxlock:", ctxlock.__version__)'
    fi
    "$py" -m pytest -q -p no:cacheprovider
    if [ "$flavour" = 3.14t ]; then
        for threads in 4 8; do
            echo "== stress on $flavour, $threads threads, ${STRESS_SECONDS} s per test"
            CTXLOCK_STRESS_THREADS=$threads CTXLOCK_STRESS_SECONDS=$STRESS_SECONDS \
                "$py" -m pytest -q -p no:cacheprovider -m stress tests/test_stress.py
        done
    fi
done
