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


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _analytic_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package ships a learned model for the H200, and the model backend prices plans as an H200; tests
    that compare against analytic figures would silently use it. Tests of the shipped model read
    SHIPPED_MODEL_PATH explicitly. The search and learned.load_default both read this one setting."""
    import fusionsearch.costmodel.hardware as hardware

    monkeypatch.setattr(hardware, "DEFAULT_MODEL_PATH", os.path.join(_CACHE_DIR, "no-shipped-model.skops"))
