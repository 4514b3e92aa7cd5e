"""Issue 53 item 10: a gather index out of range never reads outside its table. A compiled or exported plan of
gather_mm or moe_ffn given an index of 10**9 or a negative one died with SIGSEGV in Triton's interpreter; one past
the end returned numbers (2.6e35, NaN) where eager raises IndexError. Every kernel that gathers rows (template
and pointwise prologues, the decode and grouped kinds, the grouped kind's routing) now clamps its rows into the
table and checks them (tile.check_index): on a CPU the module raises IndexOutOfRange (an IndexError; the API's
MeasureError), on a GPU a device assert stops the kernel. The far-out indices run in a child process: before
the fix they crashed it."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.module import generate_module
from fusionsearch.codegen.runtime import compile_plan, export_plan
from fusionsearch.errors import MeasureError
from fusionsearch.kinds.grouped_matmul.source import INLINE_PAIRS
from fusionsearch.plan import Plan
from fusionsearch.search.space import enumerate_space

GATHER = {"M": 16, "K": 32, "N": 32, "T": 32}


def _gather_plans() -> list[Plan]:
    g = fs.workload("gather_mm", dtype=torch.float32, **GATHER)
    return [P.fully_fused(g), P.unfused(g)]  # the gather in a template prologue, then in a pointwise kernel


def _moe_plans(tokens: int) -> dict[str, Plan]:
    """One plan per kind mix of moe_ffn (E=4 experts, top-2): pointwise gathers + templates, the decode kind, the
    grouped kind (routing in every CTA at a few pairs, a routing kernel past INLINE_PAIRS)."""
    g = fs.workload("moe_ffn", dtype=torch.float32, T=tokens, D=32, H=32, E=4)
    space = enumerate_space(g)
    plans: dict[str, Plan] = {}
    for _, plan in space.distinct_plans(itertools.islice(space.every_params(), 400)):
        plans.setdefault("+".join(sorted({k.kind for k in plan.kernels})), plan)
    return plans


def test_every_gathering_kernel_checks_its_indices_and_is_compiled_with_its_asserts() -> None:
    plans = [*_gather_plans(), *_moe_plans(3).values(), *_moe_plans(33).values()]
    gathering = 0
    for plan in plans:
        module = generate_module(plan)
        for gk in module.kernels:
            if "tl.device_assert" in gk.source:
                gathering += 1
                assert gk.index_flag and "err_ptr" in gk.source.split(")")[0]
                assert f"{gk.name}[" in module.source and "debug=True, sanitize_overflow=False" in module.source
            else:
                assert not gk.index_flag
        assert "_index_check(index_flag)" in module.source
    assert gathering >= len(plans)


_CHILD = textwrap.dedent('''
    import json, sys, torch
    import fusionsearch as fs
    from fusionsearch import plan as P
    from fusionsearch.codegen.runtime import compile_plan
    from fusionsearch.errors import MeasureError

    g = fs.workload("gather_mm", dtype=torch.float32, **json.loads(sys.argv[1]))
    out = {}
    for label, plan in (("fused", P.fully_fused(g)), ("unfused", P.unfused(g))):
        run = compile_plan(plan)
        for bad in json.loads(sys.argv[2]):
            inputs = fs.random_inputs(g, seed=0)
            inputs[g.inputs.index("idx")][3] = bad
            try:
                run(*inputs)
                out[f"{label} {bad}"] = "no error"
            except MeasureError as e:
                out[f"{label} {bad}"] = str(e)
    print(json.dumps(out))
''')


def test_an_out_of_range_gather_index_is_refused_in_one_line_never_read() -> None:
    bad = [GATHER["T"], 10**9, -GATHER["T"] - 1, -10**9, 2**31 - 1]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(GATHER), json.dumps(bad)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"rc {run.returncode}: {run.stderr[-2000:]}"  # -11 (SIGSEGV) before
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(got) == 2 * len(bad)
    for case, message in got.items():
        assert message == "an index is out of range of the table it gathers rows from (valid: -rows to rows - 1)", \
            (case, message)


@pytest.mark.parametrize("plan", _gather_plans(), ids=["fused", "unfused"])
def test_in_range_indices_negative_ones_too_still_gather_what_eager_does(plan: Plan) -> None:
    g = plan.graph
    inputs = fs.random_inputs(g, seed=1)
    idx = inputs[g.inputs.index("idx")]
    idx[:4] = torch.tensor([-1, -GATHER["T"], 0, GATHER["T"] - 1])
    run = compile_plan(plan)
    with pytest.raises(MeasureError, match="out of range"):
        run(*[t.clone() if t is not idx else torch.full_like(idx, GATHER["T"]) for t in inputs])
    (got,) = run(*inputs)  # the flag a refused call set does not fail the next one
    (want,) = fs.reference(g, inputs)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tokens", [3, 33], ids=["inline-routing", "routing-kernel"])
def test_an_expert_index_out_of_range_is_refused_by_every_moe_kind(tokens: int) -> None:
    """An expert id past E matched no expert in the grouped kind's routing: its pair was never computed and its
    output row was whatever the buffer held. (66 pairs: past INLINE_PAIRS, a routing kernel; the grouped plan
    alone there, the other kinds' kernels do not change with T.)"""
    plans = _moe_plans(tokens)
    assert {"pointwise", "template", "decode", "grouped"} <= {kind for kinds in plans for kind in kinds.split("+")}
    if tokens > INLINE_PAIRS // 2:
        plans = {kinds: plan for kinds, plan in plans.items() if "grouped" in kinds}
        assert all("_route" in generate_module(plan).source for plan in plans.values())
    for kinds, plan in plans.items():
        g = plan.graph
        run = compile_plan(plan)
        for bad in (4, -5, 10**9):
            inputs = fs.random_inputs(g, seed=2)
            inputs[g.inputs.index("idx")][tokens // 2, 1] = bad
            with pytest.raises(MeasureError, match="out of range of the table"):
                run(*inputs)
        inputs = fs.random_inputs(g, seed=3)
        for got, want in zip(run(*inputs), fs.reference(g, inputs), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3, msg=kinds)


def test_index_fuzz_every_corruption_is_refused_or_computed_as_eager() -> None:
    """Random indices anywhere in int64 (and in range, negative included): each call either gathers what eager
    gathers or is refused, as eager refuses it."""
    rng = random.Random(53)
    plan = _gather_plans()[0]
    g = plan.graph
    run = compile_plan(plan)
    rows = GATHER["T"]
    for _ in range(12):
        inputs = fs.random_inputs(g, seed=rng.randrange(1000))
        idx = inputs[g.inputs.index("idx")]
        for _ in range(rng.randrange(1, 4)):
            idx[rng.randrange(len(idx))] = rng.choice([rng.randrange(-rows, rows), rng.randrange(-2**63, 2**63),
                                                       rows, -rows - 1])
        try:
            (want,) = fs.reference(g, inputs)
        except IndexError:
            with pytest.raises(MeasureError, match="out of range"):
                run(*inputs)
            continue
        (got,) = run(*inputs)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


_EXPORTED = textwrap.dedent('''
    import importlib.util, sys, torch
    sys.modules["fusionsearch"] = None
    spec = importlib.util.spec_from_file_location("exported", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = torch.load(sys.argv[2])
    try:
        module.run(*inputs)
        print("no error")
    except IndexError as e:
        print(type(e).__name__, isinstance(e, module.InputError), e)
''')


def test_an_exported_plan_refuses_an_out_of_range_index_without_fusionsearch(tmp_path: Path) -> None:
    plan = _gather_plans()[0]
    g = plan.graph
    path = export_plan(plan, str(tmp_path / "plan"))
    inputs = fs.random_inputs(g, seed=0)
    inputs[g.inputs.index("idx")][0] = 10**9
    torch.save(inputs, tmp_path / "inputs.pt")
    run = subprocess.run([sys.executable, "-c", _EXPORTED, path, str(tmp_path / "inputs.pt")],
                         env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"rc {run.returncode}: {run.stderr[-2000:]}"
    assert run.stdout.strip().splitlines()[-1] == (
        "IndexOutOfRange True an index is out of range of the table it gathers rows from (valid: -rows to rows - 1)")
