"""Triton's CPU interpreter computes masked lanes too (NumPy, loaded as 0): a fused division there is 0 / 0,
which NumPy warns of on every call although no such lane is stored, and exp of a large value overflows (where a
GPU raises no floating-point exception). The generated module runs its launches under NumPy's errstate "ignore";
the values stay eager's and the caller's own warnings still show."""

from __future__ import annotations

import warnings

import numpy as np
import torch

import fusionsearch as fs
from fusionsearch.graph.tolerance import rel_error


def test_a_division_over_masked_lanes_runs_without_numpy_warnings() -> None:
    x, y = torch.randn(3, 40), torch.rand(3, 40) + 0.5
    g = fs.capture(lambda a, b: a / b, x, y)
    compiled = fs.compile_plan(fs.plan.fully_fused(g))
    with warnings.catch_warnings(record=True) as seen:
        (out,) = compiled(x, y)
    assert rel_error(out, x / y) <= 1e-6
    assert not [w for w in seen if "encountered" in str(w.message)], [str(w.message) for w in seen]


def test_an_exp_overflow_in_the_interpreter_does_not_reach_the_users_stderr() -> None:
    """Issue 53 item 7: a float32 swiglu's SiLU computes exp(-x), which overflows for x = -1000 (eager gives 0
    there); the interpreter's NumPy warned "overflow encountered in exp" on stderr on every call."""
    g = fs.workload("swiglu", dtype=torch.float32, M=16, D=32, H=32)
    inputs = [t * 100 for t in fs.random_inputs(g, seed=0)]
    compiled = fs.compile_plan(fs.plan.fully_fused(g))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        (out,) = compiled(*inputs)
        steps, _ = compiled.module.steps(*inputs)
        for step in steps:
            step()
    assert [str(w.message) for w in seen] == []
    assert rel_error(out, fs.reference(g, inputs)[0]) <= 1e-5


def test_the_callers_own_numpy_warnings_still_show_around_a_plan() -> None:
    """Only the kernel launches are quiet: NumPy's error state is the caller's again after the call, and no
    process-wide filter hides the caller's own RuntimeWarnings."""
    x = torch.randn(3, 40)
    compiled = fs.compile_plan(fs.plan.fully_fused(fs.capture(lambda a: torch.exp(a * 1000), x)))
    before = np.geterr()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        compiled(x)
        np.exp(np.float32(1000))
        np.float32(0) / np.float32(0)
    assert np.geterr() == before
    assert sorted(str(w.message) for w in seen) == ["invalid value encountered in scalar divide",
                                                     "overflow encountered in exp"]
