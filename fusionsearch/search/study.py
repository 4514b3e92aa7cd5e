"""The public entry of the search: `tune` (a graph, or a PyTorch function traced first) and `run_study` (a graph
and SearchOptions), which starts worker processes where asked and otherwise searches in this process. The
driver's parts live beside it: options.py (SearchOptions), storage.py (URLs to Optuna storages), samplers.py,
objective.py (one trial), outcome.py (how a trial ended), loop.py (the trial loop), slots.py (exactly N trials
across workers), session.py (one process's part of a study), workers.py (the worker processes)."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import optuna
import torch

from fusionsearch import settings
from fusionsearch.codegen.runtime import check_interpreter
from fusionsearch.errors import SpecError, check_names
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.search.options import BACKENDS, SAMPLERS, SearchOptions, resolve_backend
from fusionsearch.search.result import TuneResult
from fusionsearch.search.session import open_session, possible_plans, run_here, run_session, search_space, setup
from fusionsearch.search.storage import make_storage, redact
from fusionsearch.search.workers import run_workers, worker_count

__all__ = ["BACKENDS", "SAMPLERS", "SearchOptions", "make_storage", "possible_plans", "redact", "resolve_backend",
           "run_study", "search_space", "tune"]

log = logging.getLogger("fusionsearch.search")


def run_study(graph: OpGraph, options: SearchOptions, inputs: Sequence[torch.Tensor] | None = None,
              hw: Any = None, judge: Any = None) -> TuneResult:
    """Search the graph's fusion and tile-config space; returns the best plan and every trial. `judge`
    (an object with judge(candidate, kernels) -> Judgement and close(); a measure.requests.Candidate: the plan's
    JSON and its built source's key) replaces the GPU's: the search then
    measures through it whatever the machine has. With several workers (options.workers) they run the study's
    trials between them, then this process runs whatever a dead worker left."""
    if judge is not None or worker_count(options.workers, resolve_backend(options.backend)) == 1:
        return run_here(graph, options, inputs, hw, judge)
    found = setup(graph, options, hw)
    if found.single:  # one plan: one trial, in this process
        return run_here(graph, options, inputs, found.hw)
    count = worker_count(options.workers, found.backend)
    own_storage = None
    if options.storage is None:  # the workers share a study: SQLite, whose heartbeat retries
        own_storage = tempfile.mkdtemp(prefix="fusionsearch-study-")  # the trials of a worker that dies
    url = f"sqlite:///{os.path.join(own_storage, 'study.db')}" if own_storage else options.storage
    assert url is not None
    try:
        session = open_session(graph, options, found, url, "" if own_storage else redact(url))
        start = time.time()
        shared = dataclasses.replace(options, storage=url, study_name=session.slots.study.study_name,
                                     backend=found.backend, trials=session.slots.total)
        for e in run_workers(graph.to_dict(), shared, inputs, count, found.backend, options.progress):
            if e.code != 0:
                log.warning("search worker %s exited with code %d: %s", e.tag, e.code, e.stderr_tail)
        # Join the study here too: whatever a dead worker left waiting (or retried) is run now.
        session.objective.tag = "main"
        res = run_session(session, inputs, None, start, options.storage)
        if own_storage:  # the study's file goes with the folder: the result keeps a copy in memory
            res.study = in_memory(session.slots.study)
        return res
    finally:
        if own_storage:
            shutil.rmtree(own_storage, ignore_errors=True)


def in_memory(study: optuna.Study) -> optuna.Study:
    """A copy of `study` in memory, every trial with it (for a study whose storage is about to be removed)."""
    memory = optuna.storages.InMemoryStorage()
    optuna.copy_study(from_study_name=study.study_name, from_storage=study._storage, to_storage=memory)
    return optuna.load_study(study_name=study.study_name, storage=memory)


def tune(fn_or_graph: Any, *example_inputs: torch.Tensor, **options: Any) -> TuneResult:
    """Search the best fusion plan for a graph, or for a PyTorch function/module traced on `example_inputs`.
    The keywords are SearchOptions' fields (trials, backend, storage, study_name, seed, timeout, ...); one left
    out takes SearchOptions' default, its one home (issue 55 item 3): nothing here repeats it.

    >>> import fusionsearch as fs
    >>> res = fs.tune(fs.workload("mm_bias_gelu", M=16, K=256, N=256), trials=8, backend="model")
    >>> res.best.kernels[0].epilogue
    ('y_bias', 'out')
    """
    check_names(options, [f for f in SearchOptions.__dataclass_fields__ if f != "worker_tag"], "fs.tune option")
    interpreting = settings.interpret_without_gpu()  # as the CLI: no GPU, Triton's interpreter (before a capture)
    signature = None
    if isinstance(fn_or_graph, OpGraph):
        graph = fn_or_graph
    elif callable(fn_or_graph):
        from fusionsearch.graph.capture import capture_program

        program = capture_program(fn_or_graph, *example_inputs)
        if program.mutated:
            raise SpecError(f"the function writes its input {program.mutated[0]!r} in place (copy_, index_put_, "
                            "slice assignment); tune a function that returns the new value instead")
        graph, signature = program.graph, program.signature
    else:
        raise SpecError(f"tune needs an OpGraph or a PyTorch function/module, got {type(fn_or_graph).__name__}")
    opts = SearchOptions(**options)
    if interpreting and resolve_backend(opts.backend) == "interpret":
        check_interpreter()  # Triton imported for a GPU before this call: say so before any trial fails on it
    given = list(example_inputs) if signature is None else signature.inputs(example_inputs, {})
    inputs = given if given and all(isinstance(t, torch.Tensor) and t.is_cuda for t in given) else None
    if inputs is not None and len(inputs) != len(graph.inputs):
        inputs = None
    res = run_study(graph, opts, inputs)
    res.signature = signature  # res.compile() is then called as the function (the module) itself
    return res


def _tune_signature() -> inspect.Signature:
    """tune's signature as help() and inspect show it: each SearchOptions field a keyword with SearchOptions'
    default, read from the dataclass (worker_tag, set in worker processes only, left out)."""
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("fn_or_graph", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="Any"),
              inspect.Parameter("example_inputs", inspect.Parameter.VAR_POSITIONAL, annotation="torch.Tensor")]
    params += [inspect.Parameter(f.name, kw, default=f.default, annotation=f.type)
               for f in dataclasses.fields(SearchOptions) if f.name != "worker_tag"]
    return inspect.Signature(params, return_annotation="TuneResult")


tune.__signature__ = _tune_signature()  # type: ignore[attr-defined]
