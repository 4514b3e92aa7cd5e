"""Compiling and measuring candidate plans in worker processes, so that what goes wrong there fails one trial.

CompilePool compiles in parallel across CPU cores: Triton compiles a kernel at its first launch and keeps the
binary in its on-disk cache; a worker that builds and launches a plan once leaves it there, so the measuring
worker then loads it without compiling. MeasureWorker judges plans one at a time in one process that owns
the GPU: a kernel that faults (an illegal address poisons the process's CUDA context), hangs past the trial's
time limit, or kills its process fails that trial with the reason, and the worker is replaced before the next.
Workers are spawned (never forked: a forked CUDA context is unusable)."""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fusionsearch.errors import MeasureError, failure_reason
from fusionsearch.measure.judge import Judgement


def _warm(spec: dict[str, Any], plan_json: str, device: str) -> str:
    """In a worker: build the graph and plan, run the plan once (compiling its kernels); '' or the reason."""
    compiled = None
    try:
        from fusionsearch.graph.reference import zero_inputs
        from fusionsearch.graph.spec import graph_from_dict
        from fusionsearch.search.plan import Plan

        g = graph_from_dict(spec)
        plan = Plan.from_json(plan_json, g)
        inputs = zero_inputs(g, device=device)
        compiled = plan.compile()
        compiled(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        return ""
    except Exception as e:  # the reason travels back; the trial fails, not the search
        from fusionsearch.codegen.runtime import naming_source

        return naming_source(failure_reason(e), compiled)


class CompilePool:
    """A pool of spawned worker processes warming Triton's cache for batches of plans."""

    def __init__(self, workers: int | None = None, device: str = "cuda", timeout_s: float = 300.0) -> None:
        self.workers = workers or max(1, min(8, (os.cpu_count() or 2) - 1))
        self.device, self.timeout_s = device, timeout_s
        self._pool: cf.ProcessPoolExecutor | None = None

    def _executor(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def warm(self, spec: dict[str, Any], plans_json: Sequence[str]) -> list[str]:
        """Compile each plan in a worker; per plan '' (ready) or why it failed (compile error, timeout, crash)."""
        if not plans_json:
            return []
        futures = [self._executor().submit(_warm, spec, p, self.device) for p in plans_json]
        out = []
        for f in futures:
            try:
                out.append(f.result(timeout=self.timeout_s))
            except cf.TimeoutError:
                out.append(f"compile timed out after {self.timeout_s:.0f} s")
            except Exception as e:  # a worker that died (segfault, illegal address) is replaced next batch
                out.append(f"compile worker failed: {type(e).__name__}: {e}"[:500])
                self.close()
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


DEFAULT_JUDGE = "fusionsearch.measure.judge:judge_plan"


def _judge_function(path: str) -> Callable[..., dict[str, Any]]:
    """'module:function' -> the function (a measurement worker imports its judge by name: spawn pickles no code)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _context_lost(device: str) -> str:
    """'' while the device still runs work; otherwise why not (after an illegal address every CUDA call fails)."""
    if not device.startswith("cuda"):
        return ""
    try:
        torch.cuda.synchronize()
        (torch.ones(1, device=device) + 1).item()
        return ""
    except Exception as e:
        return failure_reason(e, 200)


def _serve(conn: Any, device: str, judge: str) -> None:
    """The measurement worker. Requests: ('graph', spec, inputs, seed, settings) sets up a graph and its inputs
    on the device, answered ('ready', '') or ('setup failed', why); ('judge', plan_json, kernels) is answered
    (judgement dict, context-lost reason), and the worker exits after answering when its CUDA context is
    lost; None stops it."""
    from fusionsearch.graph.reference import random_inputs
    from fusionsearch.graph.spec import graph_from_dict
    from fusionsearch.measure.judge import MeasureState

    fn, state, setup_error = None, None, ""
    try:
        fn = _judge_function(judge)
    except Exception as e:
        setup_error = failure_reason(e)
    while True:
        try:
            request = conn.recv()
        except EOFError:  # the caller has gone
            return
        if request is None:
            return
        if request[0] == "graph":
            _, spec, inputs, seed, settings = request
            state = None
            try:
                if setup_error:
                    raise RuntimeError(setup_error)
                g = graph_from_dict(spec)
                on_device = (random_inputs(g, seed=seed, device=device) if inputs is None
                             else [t.to(device) for t in inputs])
                state = MeasureState(g, on_device, seed, settings)
                conn.send(("ready", ""))
            except Exception as e:
                conn.send(("setup failed", setup_error or failure_reason(e)))
            continue
        _, plan_json, kernels = request
        try:
            result = fn(state, plan_json, kernels)  # type: ignore[misc]
        except Exception as e:
            result = {"ok": False, "reason": f"failed: {failure_reason(e)}"}
        lost = _context_lost(device)
        conn.send((result, lost))
        if lost:
            return


def _exit_description(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class MeasureWorker:
    """Judges plans in a spawned process that owns the GPU, one at a time, each within `timeout_s`; a plan
    whose kernel faults, hangs or kills the process gets that as its reason and the next plan a fresh worker.
    The worker holds one graph at a time (set_graph; the constructor's by default): `inputs` (copied to the CPU
    to cross the pipe) are the caller's, None draws them from `seed`; `settings` reach the judge as
    MeasureState.settings. `judge` names the function that judges a plan ('module:function', as
    measure.judge.judge_plan)."""

    def __init__(self, graph_spec: dict[str, Any] | None = None, inputs: Sequence[torch.Tensor] | None = None,
                 device: str = "cuda", seed: int = 0, timeout_s: float = 300.0, start_timeout_s: float = 600.0,
                 judge: str = DEFAULT_JUDGE, settings: dict[str, Any] | None = None) -> None:
        self.device, self.judge_path = device, judge
        self.timeout_s, self.start_timeout_s = timeout_s, start_timeout_s
        self.started = 0  # worker processes started so far: 1 + the number replaced
        self._proc: Any = None
        self._conn: Any = None
        self._graph: tuple[Any, ...] | None = None
        self._ready = False
        if graph_spec is not None:
            self.set_graph(graph_spec, inputs, seed, settings)

    def set_graph(self, graph_spec: dict[str, Any], inputs: Sequence[torch.Tensor] | None = None, seed: int = 0,
                  settings: dict[str, Any] | None = None) -> None:
        """Judge plans of this graph from now on (set up in the worker before the next judgement)."""
        cpu = None if inputs is None else [t.detach().cpu() for t in inputs]
        self._graph = ("graph", graph_spec, cpu, seed, dict(settings or {}))
        self._ready = False

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child, self.device, self.judge_path), daemon=True)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.started += 1

    def _set_up(self) -> None:
        """Start the worker if needed and give it the current graph; raises MeasureError when it cannot."""
        if self._graph is None:
            raise MeasureError("MeasureWorker.judge before set_graph: no graph to judge plans of")
        if self._proc is None:
            self._start()
        try:
            self._conn.send(self._graph)
            if not self._conn.poll(self.start_timeout_s):
                self._stop(kill=True)
                raise MeasureError(f"the measurement worker did not set up within {self.start_timeout_s:g} s")
            status, why = self._conn.recv()
        except (EOFError, OSError) as e:
            code = self._stop(kill=True)
            raise MeasureError(f"the measurement worker died while setting up ({_exit_description(code)})") from e
        if status != "ready":
            raise MeasureError(f"the measurement worker could not set up the graph and its inputs: {why}")
        self._ready = True

    def judge(self, plan_json: str, kernels: bool = False) -> Judgement:
        """The plan's judgement; never raises for what the plan's kernels do (a worker that cannot even set up
        raises MeasureError, which fails the trial)."""
        if self._proc is None or not self._ready:
            self._set_up()
        try:
            self._conn.send(("judge", plan_json, kernels))
            if not self._conn.poll(self.timeout_s):
                self._stop(kill=True)
                return Judgement(False, f"timed out after {self.timeout_s:g} s; the measurement worker was replaced")
            result, lost = self._conn.recv()
        except (EOFError, OSError):
            code = self._stop(kill=True)
            return Judgement(False, f"failed: the measurement worker died ({_exit_description(code)}); replaced")
        judgement = Judgement.from_dict(result)
        if lost:
            self._stop(kill=False)
            reason = judgement.reason or "failed"
            return Judgement(False, f"{reason}; the GPU context was lost ({lost}); the measurement worker was "
                             "replaced", judgement.rel_err)
        return judgement

    def _stop(self, kill: bool) -> int | None:
        """End the worker (killed, or after it exits by itself); its exit code."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        self._ready = False
        if proc is None:
            return None
        if kill:
            proc.kill()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
        if conn is not None:
            conn.close()
        return proc.exitcode

    def close(self) -> None:
        """Ask the worker to stop; kill it if it does not."""
        if self._conn is not None:
            try:
                self._conn.send(None)
            except OSError:
                pass
        if self._proc is not None:
            self._proc.join(10)
        self._stop(kill=True)
