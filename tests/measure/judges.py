"""Judges for the measurement worker's CPU tests, imported by name in the spawned worker: each prices a plan by
the analytic model (an independent, deterministic figure) or misbehaves as a faulting kernel would."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from fusionsearch.costmodel.analytic import estimate
from fusionsearch.costmodel.hardware import H200
from fusionsearch.measure.judge import MeasureState
from fusionsearch.plan import Plan, TemplateKernel


def priced(state: MeasureState, plan_json: str, kernels: bool) -> dict[str, Any]:
    """The analytic estimate as the 'measured' time, and the worker's pid as kernel_us (to count workers)."""
    plan = Plan.from_json(plan_json, state.graph)
    out: dict[str, Any] = {"ok": True, "rel_err": 0.0, "median_us": estimate(plan, H200).time_us}
    if kernels:
        out["kernel_us"] = [float(os.getpid())]
    return out


def has_prologue(plan_json: str, state: MeasureState) -> bool:
    plan = Plan.from_json(plan_json, state.graph)
    return any(isinstance(k, TemplateKernel) and (k.prologue_a or k.prologue_b) for k in plan.kernels)


def segfault_on_prologue(state: MeasureState, plan_json: str, kernels: bool) -> dict[str, Any]:
    """Every plan with a fused prologue kills its process with SIGSEGV, as a kernel's bad access can."""
    if has_prologue(plan_json, state):
        os.kill(os.getpid(), signal.SIGSEGV)
    return priced(state, plan_json, kernels)


def segfault(state: MeasureState, plan_json: str, kernels: bool) -> dict[str, Any]:
    os.kill(os.getpid(), signal.SIGSEGV)
    return {}


def hang(state: MeasureState, plan_json: str, kernels: bool) -> dict[str, Any]:
    time.sleep(600)
    return {}


def exit_quietly(state: MeasureState, plan_json: str, kernels: bool) -> dict[str, Any]:
    os._exit(3)


def raises(state: MeasureState, plan_json: str, kernels: bool) -> dict[str, Any]:
    raise RuntimeError("CUDA error: an illegal memory access was encountered\nlast line says why")


def input_sums(state: MeasureState, plan_json: str, kernels: bool) -> dict[str, Any]:
    """The sum of every input as the 'time': shows which inputs the worker holds."""
    return {"ok": True, "median_us": sum(float(t.double().sum()) for t in state.inputs)}


def dataset_segfault_on_prologue(state: MeasureState, plan_json: str, kernels: bool) -> dict[str, Any]:
    """The collection's judge, except that every plan with a fused prologue kills its process."""
    from fusionsearch.search.collect import judge_for_dataset

    if has_prologue(plan_json, state):
        os.kill(os.getpid(), signal.SIGSEGV)
    return judge_for_dataset(state, plan_json, kernels)
