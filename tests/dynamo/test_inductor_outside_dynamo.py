"""The backend's own Inductor compiles (a region's race, the joined step) run outside the Dynamo compile in
progress: compile_fx takes the active tracing context's fake mode, whose ShapeEnv is Dynamo's, and a guard its
passes left there on sizes with no source broke Dynamo's guards for the frame (IndexError in produce_guards:
the H100 run of 2026-12-07 g, max-autotune's mm decomposition at M=1). Here Dynamo's context is stood in by an
outer TracingContext, and compile_fx is asked which context it runs in."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from fusionsearch import workload
from fusionsearch.dynamo.join import RegionStep, glue, inductor_whole
from fusionsearch.dynamo.race import inductor_region
from fusionsearch.dynamo.regions import partition
from fusionsearch.graph.capture import CapturedProgram
from fusionsearch.graph.reference import random_inputs, reference


@pytest.fixture
def contexts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    import torch._inductor.compile_fx as cfx

    seen: list[Any] = []
    real = cfx.compile_fx

    def recording(gm: Any, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(torch._guards.TracingContext.try_get())
        return real(gm, example_inputs, *args, **kwargs)

    monkeypatch.setattr(cfx, "compile_fx", recording)
    return seen


def test_a_regions_race_compile_and_the_joined_step_do_not_run_in_dynamos_context(contexts: list[Any]) -> None:
    g = workload("mm_bias_gelu", dtype=torch.float32, M=8, K=16, N=16)
    inputs = random_inputs(g)
    want = reference(g, inputs)
    dynamo = torch._guards.TracingContext(FakeTensorMode(shape_env=ShapeEnv()))
    with torch._guards.tracing(dynamo), torch.no_grad():
        region = inductor_region(g, inputs, "default")
        steps = [RegionStep(glue(r), r, "inductor") for r in partition(g)]
        whole = inductor_whole(CapturedProgram(g, len(g.outputs), ()), steps, list(inputs))
    assert len(contexts) == 2 and all(c is not dynamo for c in contexts)
    for got in (region(*inputs), whole(*inputs)):
        for o, w in zip(got, want, strict=True):
            assert torch.allclose(o, w, rtol=1e-4, atol=1e-5)
