"""Compiling and measuring candidate plans in worker processes, so that what goes wrong there fails one trial.

CompilePool compiles in parallel across CPU cores: Triton compiles a kernel at its first launch and keeps the
binary in its on-disk cache; a worker that builds and launches a plan once leaves it there, so the measuring
worker then loads it without compiling. MeasureWorker judges plans one at a time in one process that owns
the GPU: a kernel that faults (an illegal address poisons the process's CUDA context), hangs past the trial's
time limit, or kills its process fails that trial with the reason, and the worker is replaced before the next.

Workers are fresh interpreters (`python -m fusionsearch.measure.isolate`, never forked: a forked CUDA context
is unusable) talking over a socket pair. Unlike multiprocessing's spawn they never re-import the caller's
main script, so a script without an `if __name__ == "__main__"` guard, or one read from stdin, still works.
What crosses is measure.requests' values: a plan as a Candidate whose module the caller generated once (the
workers read its source back from the kernel cache by its content key, and generate only without one); each
worker builds its graph once per spec."""

from __future__ import annotations

import dataclasses
import importlib
import io
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import torch

from fusionsearch import settings
from fusionsearch.codegen.runtime import compile_plan, naming_source
from fusionsearch.errors import MeasureError, failure_reason
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.reference import zero_inputs
from fusionsearch.graph.spec import graph_from_dict
from fusionsearch.measure.judge import Judgement, handed
from fusionsearch.measure.requests import (
    Candidate,
    CompileRequest,
    CompileResponse,
    JudgeRequest,
    JudgeResponse,
    RetimeRequest,
    RetimeResponse,
    SetupRequest,
    SetupResponse,
)
from fusionsearch.plan import Plan

log = logging.getLogger("fusionsearch.measure")


def _warm(g: OpGraph, candidate: Candidate, device: str) -> str:
    """In a worker: run the candidate once (compiling its kernels) from the source handed by key; '' or the
    reason."""
    compiled = None
    try:
        plan = Plan.from_json(candidate.plan_json, g, None)
        inputs = zero_inputs(g, device=device)
        compiled = compile_plan(plan, handed(candidate))
        compiled(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        return ""
    except Exception as e:  # the reason travels back; the trial fails, not the search
        return naming_source(failure_reason(e), compiled)


def _exit_description(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Worker:
    """One worker interpreter and the connection to it."""

    def __init__(self, role: str, device: str, judge: str = "") -> None:
        ours, theirs = socket.socketpair()
        # The worker imports what this process can: tests and scripts put their folders on sys.path.
        env = settings.child_environment()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fusionsearch.measure.isolate", str(theirs.fileno()), role, device, judge],
            pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(ours.detach())

    def stop(self, kill: bool) -> int | None:
        """End the worker (killed, or after it exits by itself); its exit code."""
        if kill:
            self.proc.kill()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.conn.close()
        return self.proc.returncode

    def close(self) -> None:
        """Ask the worker to stop; kill it if it does not within 10 s."""
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.stop(kill=False)


class CompilePool:
    """Worker processes warming Triton's cache for batches of plans, one plan per worker at a time; a plan
    whose compile hangs past `timeout_s`, kills its worker or loses its CUDA context (a kernel that faults
    when it runs once) gets that as its reason, and the worker is replaced (a worker kept after a fault failed
    every later plan it took: 531 of 2,505 rows of an H100 collection, 2026-12-06)."""

    def __init__(self, workers: int | None = None, device: str = "cuda", timeout_s: float = 300.0) -> None:
        self.workers = workers or max(1, min(8, (os.cpu_count() or 2) - 1))
        self.device, self.timeout_s = device, timeout_s
        self._idle: list[_Worker] = []

    def warm(self, spec: dict[str, Any], plans: Sequence[Candidate | str]) -> list[str]:
        """Compile each plan (a Candidate, built by the caller; or its JSON, generated in the worker) in a
        worker; per plan '' (ready) or why it failed (compile error, timeout, crash)."""
        candidates = [Candidate.of(p) for p in plans]
        out = [""] * len(candidates)
        waiting = list(range(len(candidates)))
        busy: dict[Connection, tuple[_Worker, int, float]] = {}
        while waiting or busy:
            while waiting and len(busy) < self.workers:
                worker = self._idle.pop() if self._idle else _Worker("compile", self.device)
                index = waiting.pop(0)
                try:
                    worker.conn.send(CompileRequest(spec, candidates[index]))
                except OSError:  # died while idle: its plan goes to a fresh worker
                    worker.stop(kill=True)
                    waiting.insert(0, index)
                    continue
                busy[worker.conn] = (worker, index, time.time() + self.timeout_s)
            soonest = min(deadline for _, _, deadline in busy.values())
            for conn in wait(list(busy), timeout=max(0.0, soonest - time.time())):
                worker, index, _ = busy.pop(conn)  # type: ignore[call-overload]
                try:
                    answer: CompileResponse = conn.recv()  # type: ignore[union-attr]
                    out[index], lost = answer.reason, answer.lost
                except (EOFError, OSError):
                    out[index] = f"compile worker died ({_exit_description(worker.stop(kill=True))})"
                    continue
                if lost:  # a kernel faulted: every later CUDA call of that worker would fail, so it goes
                    out[index] = f"{out[index] or 'ran'}; the compile worker's CUDA context was lost ({lost}), " \
                                 "the worker is replaced"
                    worker.stop(kill=True)
                else:
                    self._idle.append(worker)
            for conn, (worker, index, deadline) in list(busy.items()):
                if time.time() >= deadline:
                    del busy[conn]
                    worker.stop(kill=True)
                    out[index] = f"compile timed out after {self.timeout_s:.0f} s"
        return out

    def close(self) -> None:
        for worker in self._idle:
            worker.close()
        self._idle = []


DEFAULT_JUDGE = "fusionsearch.measure.judge:judge_plan"


def _judge_function(path: str) -> Callable[..., dict[str, Any]]:
    """The function that "module:function" names: a worker imports its judge by name (no code crosses the pipe)."""
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


def _serve_compiles(conn: Any, device: str) -> None:
    """The compile worker: a CompileRequest is answered by a CompileResponse; the graph is built once per spec
    (the next requests bring the same one); the worker exits after answering when its CUDA context is lost
    (after an illegal address this process can run nothing more); None stops it."""
    spec: dict[str, Any] | None = None
    g: OpGraph | None = None
    graph_error = ""
    while True:
        try:
            request: CompileRequest | None = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        if request.graph != spec:  # the first request's, or another graph's
            spec, g, graph_error = request.graph, None, ""
            try:
                g = graph_from_dict(spec)
            except Exception as e:  # every plan of this graph fails with the reason
                graph_error = failure_reason(e)
        reason = graph_error or _warm(g, request.candidate, device)  # type: ignore[arg-type]
        lost = _context_lost(device)
        conn.send(CompileResponse(request.candidate.key, reason, lost))
        if lost:
            return


def _serve(conn: Any, device: str, judge: str) -> None:
    """The measurement worker. A SetupRequest sets up a graph and its inputs on the device (SetupResponse); a
    JudgeRequest is answered by a JudgeResponse, a RetimeRequest (measure.judge.retime_plans) by a
    RetimeResponse, each with the context-lost reason; the worker exits after answering when its CUDA context
    is lost; None stops it."""
    from fusionsearch.graph.reference import random_inputs
    from fusionsearch.measure.judge import MeasureState, retime_plans

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
        if isinstance(request, SetupRequest):
            state = None
            try:
                if setup_error:
                    raise RuntimeError(setup_error)
                g = graph_from_dict(request.graph)
                on_device = (random_inputs(g, seed=request.seed, device=device) if request.inputs is None
                             else [t.to(device) for t in torch.load(io.BytesIO(request.inputs), weights_only=True)])
                state = MeasureState(g, on_device, request.seed, dict(request.settings))
                conn.send(SetupResponse(True))
            except Exception as e:
                conn.send(SetupResponse(False, setup_error or failure_reason(e)))
            continue
        answer: RetimeResponse | JudgeResponse
        if isinstance(request, RetimeRequest):
            jsons = [c.plan_json for c in request.candidates]
            try:
                state.hand(request.candidates)  # type: ignore[union-attr]
                result = retime_plans(state, jsons, request.rounds)  # type: ignore[arg-type]
            except Exception as e:
                result = {"us": [None] * len(jsons), "reason": failure_reason(e)}
            answer = RetimeResponse(tuple(c.key for c in request.candidates), tuple(result["us"]),
                                    str(result.get("reason", "")))
        else:
            candidate = request.candidate
            try:
                state.hand([candidate])  # type: ignore[union-attr]
                judgement = Judgement.from_dict(fn(state, candidate.plan_json, request.kernels))  # type: ignore[misc]
            except Exception as e:
                judgement = Judgement(False, f"failed: {failure_reason(e)}")
            answer = JudgeResponse(candidate.key, judgement)
        lost = _context_lost(device)
        conn.send(dataclasses.replace(answer, lost=lost))
        if lost:
            return


class MeasureWorker:
    """Judges plans in a worker process that owns the GPU, one at a time, each within `timeout_s`; a plan
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
        self._worker: _Worker | None = None
        self._graph: SetupRequest | None = None
        self._ready = False
        if graph_spec is not None:
            self.set_graph(graph_spec, inputs, seed, settings)

    def set_graph(self, graph_spec: dict[str, Any], inputs: Sequence[torch.Tensor] | None = None, seed: int = 0,
                  settings: dict[str, Any] | None = None) -> None:
        """Judge plans of this graph from now on (set up in the worker before the next judgement)."""
        packed = None
        if inputs is not None:  # plain bytes cross the pipe: no shared memory to hand over
            buffer = io.BytesIO()
            torch.save([t.detach().cpu() for t in inputs], buffer)
            packed = buffer.getvalue()
        self._graph = SetupRequest(graph_spec, packed, seed, dict(settings or {}))
        self._ready = False

    @property
    def _conn(self) -> Connection:
        assert self._worker is not None
        return self._worker.conn

    def _set_up(self) -> None:
        """Start the worker if needed and give it the current graph; raises MeasureError when it cannot."""
        if self._graph is None:
            raise MeasureError("MeasureWorker.judge before set_graph: no graph to judge plans of")
        if self._worker is None:
            self._worker = _Worker("measure", self.device, self.judge_path)
            self.started += 1
        try:
            self._conn.send(self._graph)
            if not self._conn.poll(self.start_timeout_s):
                self._stop(kill=True)
                raise MeasureError(f"the measurement worker did not set up within {self.start_timeout_s:g} s")
            setup: SetupResponse = self._conn.recv()
        except (EOFError, OSError) as e:
            code = self._stop(kill=True)
            raise MeasureError(f"the measurement worker died while setting up ({_exit_description(code)})") from e
        if not setup.ready:
            raise MeasureError(f"the measurement worker could not set up the graph and its inputs: {setup.reason}")
        self._ready = True

    def _ask(self, request: JudgeRequest | RetimeRequest) -> JudgeResponse | RetimeResponse | str:
        """Send one request to the worker (started and set up first if needed) and wait for its answer, or why
        there is none, the worker then replaced (also after an answer whose context-lost reason is set)."""
        if self._worker is None or not self._ready:
            self._set_up()
        try:
            self._conn.send(request)
            if not self._conn.poll(self.timeout_s):
                self._stop(kill=True)
                return f"timed out after {self.timeout_s:g} s; the measurement worker was replaced"
            answer: JudgeResponse | RetimeResponse = self._conn.recv()
        except (EOFError, OSError):
            code = self._stop(kill=True)
            return f"failed: the measurement worker died ({_exit_description(code)}); replaced"
        if answer.lost:
            self._stop(kill=False)
        return answer

    def judge(self, plan: Candidate | str, kernels: bool = False) -> Judgement:
        """The plan's judgement (a Candidate, built by the caller; or its JSON, generated in the worker); never
        raises for what the plan's kernels do (a worker that cannot even set up raises MeasureError, which
        fails the trial)."""
        answer = self._ask(JudgeRequest(Candidate.of(plan), kernels))
        if isinstance(answer, str):
            return Judgement(False, answer)
        assert isinstance(answer, JudgeResponse)
        judgement = answer.judgement
        if answer.lost:
            reason = judgement.reason or "failed"
            return Judgement(False, f"{reason}; the GPU context was lost ({answer.lost}); the measurement worker "
                             "was replaced", judgement.rel_err)
        return judgement

    def retime(self, plans: Sequence[Candidate | str], rounds: int = 5) -> list[float | None]:
        """Plans already judged, timed again side by side in interleaved rounds (measure.judge.retime_plans):
        each one's median over rounds, None where it could not be timed (also when the worker died or timed
        out: the search then keeps its first figures; the reason is logged)."""
        if not plans:
            return []
        nothing: list[float | None] = [None] * len(plans)
        answer = self._ask(RetimeRequest(tuple(Candidate.of(p) for p in plans), rounds))
        if isinstance(answer, str):
            why = answer
        else:
            assert isinstance(answer, RetimeResponse)
            if not answer.lost and not answer.reason:
                return list(answer.us)
            why = f"the GPU context was lost ({answer.lost})" if answer.lost else answer.reason
        log.warning("re-timing %d plans in the measurement worker gave nothing: %s", len(plans), why)
        return nothing

    def _stop(self, kill: bool) -> int | None:
        """End the worker (killed, or after it exits by itself); its exit code."""
        worker, self._worker, self._ready = self._worker, None, False
        return None if worker is None else worker.stop(kill)

    def close(self) -> None:
        """Ask the worker to stop; kill it if it does not."""
        worker, self._worker, self._ready = self._worker, None, False
        if worker is not None:
            worker.close()


def serve(conn: Any, role: str, device: str, judge: str = "") -> None:
    """A worker's loop on its connection: role 'measure' (with the judge's 'module:function') or 'compile'."""
    if role == "measure":
        _serve(conn, device, judge)
    else:
        _serve_compiles(conn, device)


def _child_main(argv: Sequence[str]) -> None:
    """A worker interpreter: argv = the socket's fd, the role (compile or measure), the device, the judge."""
    serve(Connection(int(argv[0])), argv[1], argv[2], argv[3] if len(argv) > 3 else "")


if __name__ == "__main__":
    _child_main(sys.argv[1:])
