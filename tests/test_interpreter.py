"""What the extension tells the interpreter: free-threaded builds keep the GIL off."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

import pytest

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@pytest.mark.skipif(not FREE_THREADED, reason="a free-threaded (3.13t+) interpreter only")
def test_importing_ctxlock_leaves_the_gil_off() -> None:
    # A fresh interpreter: this one may have imported extensions that turned the GIL on.
    code = "import sys, ctxlock; print(sys._is_gil_enabled())"
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHON_GIL"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False", proc.stdout + proc.stderr


def test_the_extension_is_built_for_this_interpreter() -> None:
    import ctxlock._ctxlock as ext

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert ext.__file__ is not None and ext.__file__.endswith(suffix), (ext.__file__, suffix)
