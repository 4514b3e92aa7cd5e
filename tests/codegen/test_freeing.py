"""The generated `run` deletes each intermediate buffer after the last kernel that reads it (eager PyTorch frees
a temporary at its last use; holding every one to the end raised swiglu M2048's peak memory above eager's on
the H200). A deletion before a later read would raise NameError in `run`: validation against the float64
reference catches that, and the source is checked so that no line after a `del` names the buffer."""

from __future__ import annotations

import re

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.measure import validate


def _plans() -> list[tuple[str, P.Plan]]:
    swiglu = fs.workload("swiglu", dtype=torch.float32, M=20, D=32, H=48)
    gelu = fs.workload("mm_bias_gelu", dtype=torch.float32, M=24, K=32, N=40)
    g = fs.OpGraph()  # an intermediate that is also an output, and an extern between two kernels
    x, w = g.input("x", (16, 32), torch.float32), g.input("w", (32, 24), torch.float32)
    y = g.add("mm", [x, w], name="y")
    soft = g.add("extern", [y], name="soft", target="aten._softmax.default", args=[{"input": 0}, 1, False])
    g.set_outputs([g.add("relu", [soft], name="out"), y])
    return [("swiglu unfused", P.unfused(swiglu)), ("swiglu heuristic", P.heuristic(swiglu)),
            ("swiglu library", P.build_plan(swiglu, {}, library=swiglu.nodes_of_kind("template"))),
            ("mm_bias_gelu unfused", P.unfused(gelu)), ("mm_bias_gelu fused", P.fully_fused(gelu)),
            ("extern and an intermediate output", P.unfused(g))]


@pytest.mark.parametrize("name,plan", _plans(), ids=[n for n, _ in _plans()])
def test_run_frees_each_intermediate_after_its_last_reader(name: str, plan: P.Plan) -> None:
    source = compile_plan(plan).source
    run = source[source.index("def run("):source.index("@_quiet_kernels\ndef steps(")].rstrip().splitlines()
    steps = source[source.index("def steps("):]
    assert "del " not in steps  # its callables run the kernels again over the same buffers
    outputs = re.search(r"return \[(.*)\]", run[-1]).group(1).split(", ")  # type: ignore[union-attr]
    inputs = re.search(r"^    (.*), = inputs$", "\n".join(run), re.M).group(1).split(", ")  # type: ignore[union-attr]
    assigned = {m.group(1) for line in run if (m := re.match(r"^    (buf\d+) = ", line))}
    deleted: dict[str, int] = {}
    for i, line in enumerate(run):
        if line.startswith("    del "):
            for b in line.removeprefix("    del ").split(", "):
                assert b not in deleted, f"{b} deleted twice"
                deleted[b] = i
    assert set(deleted) == assigned - set(outputs) - set(inputs)
    for b, i in deleted.items():
        later = "\n".join(run[i + 1:])
        assert not re.search(rf"\b{b}\b", later), f"{b} is read after it is deleted"
    v = validate(plan, plan.graph)
    assert v.ok, v.reason
