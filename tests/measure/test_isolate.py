"""The measurement worker (measure.isolate.MeasureWorker) on the CPU: plans judged in a spawned process; a
judge that segfaults, hangs, exits or raises fails its own plan with the reason and the next plan gets a
fresh worker; a search measuring through such a worker completes every trial. The GPU's own faults (an
illegal address poisoning the context) are shown by benchmarks/fault_gpu.py."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
import time

import pytest
import torch

import fusionsearch as fs
from fusionsearch.costmodel.analytic import estimate
from fusionsearch.costmodel.hardware import H200
from fusionsearch.errors import MeasureError
from fusionsearch.measure.isolate import MeasureWorker
from fusionsearch.plan import TemplateKernel, fully_fused, unfused
from fusionsearch.search.study import SearchOptions, run_study

G = fs.workload("w8_dequant_mm", dtype=torch.float32, M=16, K=128, N=96)


def worker(judge: str, **kw: object) -> MeasureWorker:
    return MeasureWorker(G.to_dict(), device="cpu", judge=f"judges:{judge}", **kw)  # type: ignore[arg-type]


def test_the_real_judge_validates_in_the_worker_against_the_float64_reference() -> None:
    """On the CPU the real judge validates (Triton's interpreter) and then cannot time: the reason says so;
    NaN in the search's inputs is reported by validation, never passed."""
    good = fs.random_inputs(G, seed=0)
    w = MeasureWorker(G.to_dict(), good, device="cpu")
    try:
        j = w.judge(fully_fused(G).to_json())
    finally:
        w.close()
    assert not j.ok and "timing needs a CUDA GPU" in j.reason, j
    assert j.rel_err is not None and j.rel_err <= 1e-5  # validated in fp32 before timing was attempted
    bad = [t.clone() for t in good]
    bad[0][0, 0] = math.nan
    w = MeasureWorker(G.to_dict(), bad, device="cpu")
    try:
        j = w.judge(unfused(G).to_json())
    finally:
        w.close()
    assert not j.ok and j.reason.startswith("invalid:") and "NaN/Inf" in j.reason, j


def test_a_segfaulting_plan_fails_alone_and_the_next_plan_gets_a_fresh_worker() -> None:
    w = worker("segfault_on_prologue")
    try:
        fused, plain = fully_fused(G), unfused(G)
        assert any(isinstance(k, TemplateKernel) and k.prologue_b for k in fused.kernels)
        first = w.judge(plain.to_json())
        crashed = w.judge(fused.to_json())
        after = w.judge(plain.to_json())
    finally:
        w.close()
    assert first.ok and first.median_us == pytest.approx(estimate(plain, H200).time_us)
    assert not crashed.ok and "SIGSEGV" in crashed.reason and "replaced" in crashed.reason, crashed
    assert after.ok and after.median_us == first.median_us
    assert w.started == 2


def test_a_hanging_plan_times_out_and_the_worker_is_replaced() -> None:
    w = worker("hang", timeout_s=1.5)
    try:
        start = time.time()
        j = w.judge(unfused(G).to_json())
        took = time.time() - start
        assert not j.ok and j.reason.startswith("timed out after 1.5 s"), j
        assert took < 1.5 + 15  # the wait, then the kill; never the judge's 600 s sleep
        assert w._worker is None  # killed, not kept
        j2 = w.judge(unfused(G).to_json())
        assert not j2.ok and w.started == 2
    finally:
        w.close()


def test_a_worker_that_exits_or_raises() -> None:
    w = worker("exit_quietly")
    try:
        j = w.judge(unfused(G).to_json())
    finally:
        w.close()
    assert not j.ok and "exit code 3" in j.reason, j
    w = worker("raises")
    try:
        j1, j2 = w.judge(unfused(G).to_json()), w.judge(unfused(G).to_json())
    finally:
        w.close()
    assert j1.reason == "failed: RuntimeError: CUDA error: an illegal memory access was encountered" and not j2.ok
    assert w.started == 1  # an exception is the judge's answer, not a dead worker


def test_a_worker_that_cannot_set_up_raises_a_measure_error() -> None:
    w = MeasureWorker(G.to_dict(), device="cpu", judge="no_such_module_anywhere:judge")
    with pytest.raises(MeasureError, match="could not set up.*ModuleNotFoundError"):
        w.judge(unfused(G).to_json())
    w.close()


def test_the_search_inputs_cross_to_the_worker() -> None:
    inputs = fs.random_inputs(G, seed=3)
    w = MeasureWorker(G.to_dict(), inputs, device="cpu", judge="judges:input_sums")
    try:
        j = w.judge(unfused(G).to_json())
    finally:
        w.close()
    assert j.ok and j.median_us == pytest.approx(sum(float(t.double().sum()) for t in inputs))


def test_a_search_measuring_through_a_crashing_worker_completes_every_trial() -> None:
    """Every plan with a fused prologue kills the worker: those trials fail with SIGSEGV, every other judged
    trial is measured (the analytic price, exactly), the study runs all its trials and the best plan is the
    cheapest one measured."""
    w = worker("segfault_on_prologue", timeout_s=120)
    res = run_study(G, SearchOptions(trials=14, sampler="random", prune_margin=1e9, bytes_rule=None,
                                     cost_model="analytic", max_configs=4), judge=w)
    assert len(res.trials) == 14
    judged = [t for t in res.trials if t.status in ("measured", "failed")]
    faulted = [t for t in judged if t.status == "failed"]
    measured = [t for t in judged if t.status == "measured"]
    assert faulted and measured, [(t.status, t.reason) for t in res.trials]
    space_plans = {t.number: res.space.plan(t.params) for t in judged}
    for t in faulted:
        assert "SIGSEGV" in t.reason, t.reason
        assert any(isinstance(k, TemplateKernel) and (k.prologue_a or k.prologue_b)
                   for k in space_plans[t.number].kernels)
    for t in measured:
        assert t.measured_us == pytest.approx(estimate(space_plans[t.number], H200).time_us)
    assert res.best_us == min(t.measured_us for t in measured)
    assert len(faulted) <= w.started <= len(faulted) + 1
    assert res.counts().get("measured") == len(measured)


def test_isolation_and_the_trial_time_limit_are_options() -> None:
    with pytest.raises(fs.SpecError, match="trial_timeout_s"):
        SearchOptions(trial_timeout_s=0)
    with pytest.raises(fs.SpecError, match="needs backend 'gpu'"):
        run_study(G, SearchOptions(backend="model"), judge=worker("priced"))


def test_a_kernel_failure_names_the_generated_source_to_reproduce_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusionsearch.codegen.runtime import CompiledPlan, compile_plan
    from fusionsearch.measure.validate import validate

    def launch_fails(self: CompiledPlan, *inputs: torch.Tensor, poison: bool = False) -> list[torch.Tensor]:
        raise RuntimeError("triton.compiler.errors.CompilationError: at 12:4: out of resources")

    monkeypatch.setattr(CompiledPlan, "__call__", launch_fails)
    plan = fully_fused(G)
    v = validate(plan, G, fs.random_inputs(G, seed=0))
    assert not v.ok and "out of resources" in v.reason
    path = v.reason.split("[generated source: ", 1)[1].rstrip("]")
    with open(path) as f:
        assert f.read() == compile_plan(plan).source  # the very source that failed, in the cache


UNGUARDED = """
import torch
import fusionsearch as fs
from fusionsearch.measure.isolate import CompilePool, MeasureWorker
from fusionsearch.plan import unfused

g = fs.workload("w8_dequant_mm", dtype=torch.float32, M=16, K=128, N=96)
w = MeasureWorker(g.to_dict(), device="cpu")
j = w.judge(unfused(g).to_json())
w.close()
print("JUDGED", j.rel_err, j.reason)
pool = CompilePool(2, device="cpu")
print("WARMED", pool.warm(g.to_dict(), [unfused(g).to_json(), "{not json", unfused(g).to_json()]))
pool.close()
"""


def test_workers_start_from_a_script_without_a_main_guard_read_from_stdin() -> None:
    """Workers are fresh interpreters: the caller's main script (here stdin, with no __main__ guard) is never
    re-run in them, as multiprocessing's spawn would."""
    out = subprocess.run([sys.executable, "-"], input=UNGUARDED, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    judged = next(line for line in out.stdout.splitlines() if line.startswith("JUDGED"))
    assert "timing needs a CUDA GPU" in judged and float(judged.split()[1]) <= 1e-5, judged
    warmed = next(line for line in out.stdout.splitlines() if line.startswith("WARMED"))
    reasons = ast.literal_eval(warmed.removeprefix("WARMED "))
    assert reasons[0] == "" and reasons[2] == "" and "JSON" in reasons[1], reasons


def test_a_cuda_error_reason_names_the_cause_not_the_advice() -> None:
    from fusionsearch.errors import failure_reason

    cuda = RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                        "asynchronously reported at some other API call.\nFor debugging consider passing "
                        "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    assert failure_reason(cuda) == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert failure_reason(ValueError("context\nthe cause")) == "ValueError: the cause"


def test_a_compile_worker_whose_cuda_context_is_lost_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan whose kernel faults when the compile worker runs it once poisons that worker's CUDA context: the
    pool names the loss in that plan's reason and starts a fresh worker, so later plans compile (a GPU's own
    fault is benchmarks/fault_gpu.py's; here a stand-in worker answers as the real one does)."""
    import threading
    from multiprocessing.connection import Pipe

    from fusionsearch.measure import isolate

    started: list[object] = []

    class FakeWorker:
        def __init__(self, role: str, device: str, judge: str = "") -> None:
            self.conn, theirs = Pipe()
            started.append(self)

            def serve() -> None:
                while (request := theirs.recv()) is not None:
                    faults = request.candidate.plan_json == "faulting plan"
                    theirs.send(isolate.CompileResponse(
                        "", "failed: AcceleratorError: an illegal memory access" if faults else "",
                        "CUDA error: an illegal memory access" if faults else ""))
                    if faults:
                        return
            threading.Thread(target=serve, daemon=True).start()

        def stop(self, kill: bool) -> int:
            return 0

        def close(self) -> None:
            self.conn.send(None)

    monkeypatch.setattr(isolate, "_Worker", FakeWorker)
    pool = isolate.CompilePool(workers=1, device="cuda")
    reasons = pool.warm({}, ["good plan", "faulting plan", "good plan", "good plan"])
    pool.close()
    assert reasons[0] == "" and reasons[2:] == ["", ""], reasons
    assert "illegal memory access" in reasons[1] and "context was lost" in reasons[1] and "replaced" in reasons[1]
    assert len(started) == 2  # one replacement, after the fault only
