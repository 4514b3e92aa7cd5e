"""Shared test setup: Triton runs in its CPU interpreter, and generated kernels go to a per-session cache.

Both variables are set at import, before any test module imports triton (the interpreter flag is read when
triton.jit decorates a function) or fusionsearch writes a kernel (it would otherwise use ~/.cache)."""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ["TRITON_INTERPRET"] = "1"
_CACHE_DIR = tempfile.mkdtemp(prefix="fusionsearch-tests-")
os.environ["FUSIONSEARCH_CACHE_DIR"] = _CACHE_DIR


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)
