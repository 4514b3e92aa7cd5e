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
    SHIPPED_MODEL_PATH explicitly. The search and learned.load_default both read this one setting (and worker
    processes inherit it with the environment)."""
    monkeypatch.setenv("FUSIONSEARCH_MODEL", os.path.join(_CACHE_DIR, "no-shipped-model.skops"))


def _postgres_database() -> str:
    """A fresh database on the server .ci/run starts (URL in $FUSIONSEARCH_TEST_POSTGRES), so that every test
    sees an empty storage; skipped without a server, failed instead where CI requires one."""
    import uuid

    url = os.environ.get("FUSIONSEARCH_TEST_POSTGRES")
    if not url:
        if os.environ.get("FUSIONSEARCH_REQUIRE_POSTGRES"):
            pytest.fail("FUSIONSEARCH_REQUIRE_POSTGRES is set but FUSIONSEARCH_TEST_POSTGRES (the server URL) is not")
        pytest.skip("no PostgreSQL server: set FUSIONSEARCH_TEST_POSTGRES=postgresql://... (.ci/run starts one)")
    import psycopg

    name = f"fs_{uuid.uuid4().hex[:16]}"
    base, _, _ = url.rpartition("/")
    with psycopg.connect(url, autocommit=True) as conn:  # CREATE DATABASE cannot run inside a transaction
        conn.execute(f"CREATE DATABASE {name}")
    return f"{base}/{name}"


@pytest.fixture
def storage_url(tmp_path: object) -> object:
    """storage_url(kind) -> an empty storage of that kind: a SQLite file, a journal file, or a PostgreSQL
    database of its own."""
    from pathlib import Path

    def make(kind: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{Path(str(tmp_path)) / 's.db'}"
        if kind == "journal":
            return f"journal:{Path(str(tmp_path)) / 'j.log'}"
        assert kind == "postgres", kind
        return _postgres_database()

    return make
