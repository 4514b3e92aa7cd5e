"""The kernel cache never runs what is on disk: a generated module is compiled from the verified source text in
memory, so a planted __pycache__/*.pyc or an entry changed after loading is never run, and an entry that cannot
be read (not UTF-8, a directory) is rebuilt instead of failing the plan."""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.module import generate_module
from fusionsearch.codegen.runtime import CompiledPlan, cache_dir, compile_plan, source_key
from fusionsearch.measure import TOLERANCE, rel_error
from fusionsearch.plan import Plan


def plan() -> Plan:
    return P.heuristic(fs.workload("mm_bias_gelu", M=5, K=24, N=40, dtype=torch.float32))


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[Plan], Path]:
    """An empty cache, and the plan's module not yet loaded in this process; returns its cache entry's path."""
    monkeypatch.setenv("FUSIONSEARCH_CACHE_DIR", str(tmp_path / "cache"))

    def entry(p: Plan) -> Path:
        key = source_key(generate_module(p).source)
        monkeypatch.delitem(sys.modules, f"fusionsearch_generated_{key}", raising=False)
        os.makedirs(cache_dir(), exist_ok=True)
        return Path(cache_dir()) / f"fs_{key}.py"

    return entry


def assert_matches_reference(compiled: CompiledPlan) -> None:
    g = compiled.plan.graph
    inputs = fs.random_inputs(g, seed=0)
    got = compiled(*inputs)
    want = fs.reference(g, inputs, float64=True)
    assert all(rel_error(a, b) <= TOLERANCE[a.dtype] for a, b in zip(got, want, strict=True))


def test_a_planted_pyc_beside_an_entry_is_never_run(fresh: Callable[[Plan], Path], tmp_path: Path) -> None:
    p = plan()
    entry = fresh(p)
    entry.write_text(generate_module(p).source)  # the verified entry, as an earlier run left it
    marker = tmp_path / "pwned"
    planted = compile(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n", str(entry), "exec")
    pyc = Path(importlib.util.cache_from_source(str(entry)))
    pyc.parent.mkdir()
    # An unchecked-hash pyc: the import system runs it without looking at the source beside it.
    pyc.write_bytes(importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + bytes(8) + marshal.dumps(planted))
    compiled = compile_plan(p)
    assert not marker.exists(), "the planted .pyc ran"
    assert_matches_reference(compiled)
    assert os.listdir(pyc.parent) == [pyc.name]  # nothing read or written there


def test_an_entry_changed_after_loading_is_not_what_the_kernels_run(fresh: Callable[[Plan], Path],
                                                                    tmp_path: Path) -> None:
    """Triton (its JIT, and the interpreter when it first runs a kernel) reads a kernel's lines through
    linecache: it gets the text that was verified, not the file as it is now."""
    p = plan()
    entry = fresh(p)
    compiled = compile_plan(p)
    marker = tmp_path / "pwned"
    text = entry.read_text()
    at = text.index("\n", text.index("def fs_kernel_0(")) + 1
    entry.write_text(text[:at] + f"    __import__('pathlib').Path({str(marker)!r}).touch()\n" + text[at:])
    os.utime(entry, (1, 1))
    assert_matches_reference(compiled)
    assert not marker.exists(), "the kernel ran from the changed file"


@pytest.mark.parametrize("damage", ["not-utf8", "directory", "other-text"])
def test_an_unreadable_entry_is_rebuilt_and_the_plan_runs(fresh: Callable[[Plan], Path], tmp_path: Path,
                                                          damage: str) -> None:
    p = plan()
    entry = fresh(p)
    outside = tmp_path / "outside.txt"
    outside.write_text("kept")
    if damage == "not-utf8":
        entry.write_bytes(b"\xff\xfe\x00 not UTF-8 \x80\x81")
    elif damage == "directory":
        entry.mkdir()
        (entry / "inner.txt").write_text("x")
        (entry / "link").symlink_to(outside)
    else:
        entry.write_text(f"import pathlib\npathlib.Path({str(tmp_path / 'pwned')!r}).touch()\n")
    compiled = compile_plan(p)
    assert entry.is_file() and entry.read_text() == compiled.source
    assert_matches_reference(compiled)
    assert outside.read_text() == "kept" and not (tmp_path / "pwned").exists()


def test_a_cache_that_cannot_be_written_still_runs_the_plan_with_a_warning(
        fresh: Callable[[Plan], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import fusionsearch.codegen.runtime as runtime

    p = plan()
    fresh(p)

    def refuse(path: str, text: str) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(runtime, "_write_atomic", refuse)
    with pytest.warns(UserWarning, match="could not be rewritten"):
        compiled = compile_plan(p)
    assert_matches_reference(compiled)
