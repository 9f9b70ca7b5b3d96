#!/usr/bin/env bash
# Makes the virtualenv of CPython 3.14 or free-threaded 3.14t (.venv-3.14, .venv-3.14t;
# the interpreter from scripts/cpython.sh, cached), installs ctxlock into it with its test
# and bench extras, and prints the path of the venv's python on stdout (everything else
# goes to stderr). Usage: scripts/cpython-venv.sh 3.14|3.14t
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -eq 1 ] || { echo "usage: $0 3.14|3.14t" >&2; exit 2; }
flavour=$1
exe=$(scripts/cpython.sh "$flavour")
venv=.venv-$flavour
py=$venv/bin/python
echo "== CPython $flavour: $("$exe" -VV | tr '\n' ' ')" >&2
if [ ! -x "$py" ]; then
    "$exe" -m venv "$venv" >&2
    "$py" -m pip install --quiet --upgrade pip >&2
fi
# Its own target dir: PyO3's build depends on the interpreter, so sharing one with the
# default build would rebuild everything at each switch.
CARGO_TARGET_DIR=target/cp$flavour "$py" -m pip install --quiet -e '.[test,bench]' >&2
echo "$py"
