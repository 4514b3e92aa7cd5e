"""Collection: the whole pipeline in its CPU mode (interpreter, wall-clock times), resuming after a torn write."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fusionsearch.costmodel.features import FEATURE_NAMES, FEATURE_SCHEMA_VERSION
from fusionsearch.costmodel.train import load_dataset
from fusionsearch.datasets.measurements import append_rows, read_rows, rows_for_fp32_dot
from fusionsearch.errors import FusionSearchError
from fusionsearch.plan import FP32_DOT
from fusionsearch.search.collect import CollectOptions, collect

OPTS = dict(plans_per_graph=3, device="cpu", shape_scale="small", compile_workers=1, dtypes=("float32",),
            progress=False)


@pytest.fixture(scope="module")
def two_graphs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """One collection of two graphs (and what collect returned), shared read-only: a test that appends to it
    works on its own copy."""
    path = tmp_path_factory.mktemp("two_graphs") / "m.jsonl.gz"
    return path, collect(str(path), CollectOptions(graphs=2, **OPTS))


def test_collect_writes_one_ok_row_per_kernel_with_features(two_graphs: tuple[Path, dict[str, int]]) -> None:
    path, counts = two_graphs
    rows = read_rows(str(path))
    assert counts == {"ok": len(rows)} and rows
    for r in rows:
        assert r["schema_version"] == FEATURE_SCHEMA_VERSION
        assert set(r["features"]) == set(FEATURE_NAMES)
        assert r["time_us"] > 0 and r["hardware"]["torch"]
    by_plan: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        by_plan.setdefault((r["graph_id"], r["plan_id"]), []).append(r["kernel_index"])
    assert all(sorted(v) == list(range(len(v))) for v in by_plan.values())  # every kernel of a plan, once
    assert len({g for g, _ in by_plan}) == 2


def test_a_killed_collection_leaves_a_readable_file_that_resumes(tmp_path: Path,
                                                                  two_graphs: tuple[Path, dict[str, int]]) -> None:
    path = str(tmp_path / "m.jsonl.gz")
    shutil.copyfile(two_graphs[0], path)  # a collection of graphs 0-1
    before = read_rows(path)
    assert len({r["graph_id"] for r in before}) == 2
    with open(path, "ab") as f:  # a batch torn by a kill in the middle of its write
        f.write(b"\x1f\x8b\x08\x00partial-batch")
    assert read_rows(path) == before
    collect(path, CollectOptions(graphs=3, **OPTS))  # resumes: graphs 0-1 are skipped, graph 2 is measured
    after = read_rows(path)
    assert after[:len(before)] == before
    keys = [(r["graph_id"], r["plan_id"], r["kernel_index"]) for r in after]
    assert len(keys) == len(set(keys)), "a resumed collection measured a plan twice"
    assert len({r["graph_id"] for r in after}) == 3


def test_plans_with_fp32_matmuls_measured_with_another_dot_are_measured_again_and_trained_on_apart(
        tmp_path: Path) -> None:
    """Rows record how fp32 matmuls multiplied; a collection resumed under another code generator default
    measures those plans again (and only those), and training reads the rows of the dot asked for."""
    path = str(tmp_path / "m.jsonl.gz")
    opts = {**OPTS, "dtypes": ("float16", "float32"), "plans_per_graph": 2}
    collect(path, CollectOptions(graphs=2, **opts))  # seed 0: one fp16 graph, one fp32 graph
    first = read_rows(path)
    assert {r["fp32_dot"] for r in first} == {FP32_DOT}
    assert all(r["status"] == "ok" and 0 <= r["rel_err"] <= 1e-3 for r in first)

    def fp32_plan(r: dict) -> bool:
        return any(o["features"]["kind_template"] == 1 and o["features"]["a_bits"] == 32 for o in first
                   if (o["graph_id"], o["plan_id"]) == (r["graph_id"], r["plan_id"]))
    fp32_keys = {(r["graph_id"], r["plan_id"]) for r in first if fp32_plan(r)}
    assert fp32_keys and len(fp32_keys) < len({(r["graph_id"], r["plan_id"]) for r in first})
    legacy = str(tmp_path / "legacy.jsonl.gz")  # as collected before rows said: the IEEE dot
    append_rows(legacy, [{k: v for k, v in r.items() if k != "fp32_dot"} for r in first])
    collect(legacy, CollectOptions(graphs=2, **opts))
    added = read_rows(legacy)[len(first):]
    assert {(r["graph_id"], r["plan_id"]) for r in added} == fp32_keys
    assert {r["fp32_dot"] for r in added} == {FP32_DOT}
    every = read_rows(legacy)
    assert len(rows_for_fp32_dot(every, FP32_DOT)) == len(first)
    assert rows_for_fp32_dot(every, "ieee") == [{k: v for k, v in r.items() if k != "fp32_dot"} for r in first]
    assert len(load_dataset(legacy)[0]) == len(first) == len(load_dataset(legacy, fp32_dot="ieee")[0])
    assert all(r.get("fp32_dot") == FP32_DOT or not fp32_plan(r) for r in load_dataset(legacy)[3])


def test_appending_after_a_torn_tail_keeps_every_byte_and_reads_every_complete_batch(tmp_path: Path) -> None:
    """A batch torn by a kill is skipped when read, never cut: appending only adds bytes after it."""
    path = str(tmp_path / "d.gz")
    append_rows(path, [{"a": 1}, {"a": 2}])
    with open(path, "ab") as f:
        f.write(b"\x1f\x8b\x08\x00torn")
    with open(path, "rb") as f:
        before = f.read()
    append_rows(path, [{"a": 3}])
    with pytest.warns(Warning, match="torn|damaged|could not|skipp"):
        assert read_rows(path) == [{"a": 1}, {"a": 2}, {"a": 3}]
    with open(path, "rb") as f:
        assert f.read().startswith(before)


def test_collect_on_the_gpu_path_without_a_gpu_is_a_clear_error(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(FusionSearchError, match="GPU"):
        collect(str(tmp_path / "x.gz"), CollectOptions(graphs=1))


def test_a_plan_that_kills_its_worker_is_recorded_failed_and_the_collection_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans with a fused prologue kill the measurement worker (SIGSEGV): their rows say so, every other plan is
    measured, and a second run meets none of them again (nothing to measure)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "measure"))  # the worker imports tests' judges
    path = str(tmp_path / "m.jsonl.gz")
    # Two graphs of four plans: 5 of the 8 kill the worker, and plans are measured after a kill in the same graph
    # and in the next
    opts = CollectOptions(graphs=2, **{**OPTS, "plans_per_graph": 4}, judge="judges:dataset_segfault_on_prologue")
    counts = collect(path, opts)
    rows = read_rows(path)
    failed = [r for r in rows if r["status"] == "failed"]
    assert failed and counts.get("ok"), counts
    for r in failed:
        assert "SIGSEGV" in r["reason"], r["reason"]
        assert any(k.get("prologue_a") or k.get("prologue_b") for k in r["plan"]["kernels"]), r["plan"]
    for r in rows:
        if r["status"] == "ok":
            assert not any(k.get("prologue_a") or k.get("prologue_b") for k in r["plan"]["kernels"])
    assert collect(path, opts) == {}
    assert read_rows(path) == rows


KILLED_COLLECTION = """
import sys
from fusionsearch.search.collect import CollectOptions, collect
collect(sys.argv[1], CollectOptions(graphs=4, plans_per_graph=3, device="cpu", shape_scale="small",
                                    compile_workers=1, dtypes=("float32",), progress=True))
"""


def test_a_sigkilled_collection_resumes_losing_nothing(tmp_path: Path) -> None:
    """SIGKILL a collection of four graphs after its second graph's rows are written, then run it again: every
    graph is in the file once, each plan's kernels once, the rows written before the kill unchanged."""
    path = str(tmp_path / "m.jsonl.gz")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_COLLECTION, path], stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("graph 2/4"):
                break
    finally:
        proc.kill()
        proc.wait()
    assert any(line.startswith("graph 2/4") for line in lines), "".join(lines)[-2000:]
    before = read_rows(path)
    assert len({r["graph_id"] for r in before}) >= 2
    collect(path, CollectOptions(graphs=4, **OPTS))
    after = read_rows(path)
    assert after[:len(before)] == before
    keys = [(r["graph_id"], r["plan_id"], r["kernel_index"]) for r in after]
    assert len(keys) == len(set(keys)), "a resumed collection measured a plan twice"
    assert len({r["graph_id"] for r in after}) == 4


def test_collect_records_each_templates_compiled_resources_as_plan_resources_finds_them(tmp_path: Path) -> None:
    """resources=True compiles each graph's plans for sm_90 in a pool kept for the collection; every template row
    carries what compiling that plan alone finds, in its row and its features."""
    import dataclasses

    from fusionsearch.codegen.resources import plan_resources
    from fusionsearch.graph.spec import graph_from_dict
    from fusionsearch.plan import Plan

    path = str(tmp_path / "m.jsonl.gz")
    collect(path, CollectOptions(graphs=1, **{**OPTS, "plans_per_graph": 2}, resources=True))
    rows = read_rows(path)
    templates = [r for r in rows if r["kernel_kind"] == "template"]
    assert templates and all(r["resources"] is None for r in rows if r["kernel_kind"] != "template")
    for r in templates:
        plan = Plan.from_dict(r["plan"], graph_from_dict(r["graph"]))
        alone = plan_resources(plan)[r["kernel_index"]]
        assert r["resources"] == dataclasses.asdict(alone) and alone.instructions > 0
        assert r["features"]["registers"] == alone.registers > 0


def test_collect_into_a_file_that_is_not_a_dataset_is_refused_before_measuring(tmp_path, monkeypatch):
    from fusionsearch.datasets import random_graphs
    from fusionsearch.errors import CostModelError

    path = tmp_path / "notes.jsonl.gz"
    path.write_text("my notes, not a dataset\n")
    measured = []
    monkeypatch.setattr(random_graphs, "random_graph", lambda *a, **k: measured.append(a))
    with pytest.raises(CostModelError, match="is not a measurements dataset"):
        collect(str(path), CollectOptions(graphs=1, **OPTS))
    assert path.read_text() == "my notes, not a dataset\n" and measured == []


def test_sampled_plans_of_an_experts_graph_include_every_other_matmul_kind() -> None:
    """The seeds of each other kind (decode, grouped) come before the random draws, so a collection of few
    plans a graph still measures rows of them."""
    import random

    from fusionsearch.costmodel.hardware import Hardware
    from fusionsearch.datasets.random_graphs import random_graph
    from fusionsearch.search.collect import sample_plans

    g = random_graph(3, family="experts", shape_scale="small")
    plans = sample_plans(g, 6, random.Random(0), Hardware.detect())
    matmul_kinds = [{k.kind for k in p.kernels if k.kind != "pointwise"} for p in plans[:5]]
    assert {"decode"} in matmul_kinds and {"grouped"} in matmul_kinds, matmul_kinds  # every matmul on that kind


def test_each_row_records_its_graphs_family_and_families_take_turns(tmp_path: Path) -> None:
    """`family` as a comma-separated list: graph i is of the (i mod n)-th family, every row says which (training
    reports per family); a bad family is refused before anything is measured."""
    from fusionsearch.datasets.random_graphs import random_graph

    path = str(tmp_path / "f.jsonl.gz")
    collect(path, CollectOptions(graphs=2, seed=4, **{**OPTS, "plans_per_graph": 2}, family="attention,mixed"))
    rows = read_rows(path)
    want = {random_graph(4, family="attention", shape_scale="small", dtypes=("float32",)).signature_hash():
            "attention",
            random_graph(5, family="mixed", shape_scale="small", dtypes=("float32",)).signature_hash(): "mixed"}
    assert {r["graph_id"]: r["family"] for r in rows} == want and all(r["status"] == "ok" for r in rows)
    with pytest.raises(FusionSearchError, match="comma-separated list of mixed"):
        collect(str(tmp_path / "g.jsonl.gz"), CollectOptions(graphs=1, **OPTS, family="mixed,moe2"))
    assert not (tmp_path / "g.jsonl.gz").exists()
