"""One study, several worker processes: one per visible GPU (each pinned to its GPU through
CUDA_VISIBLE_DEVICES) or N on the CPU backends.

The caller (search.study.run_study) lays the study out on a shared storage first; the workers join it and claim its
waiting trials, exactly as workers started by hand with --storage/--study do. While they run, one progress
bar over all of them is drawn from the storage. A worker that dies leaves its claimed trial to be failed and laid
out again (search/slots.py: by the RDB heartbeat, or on a journal file because its process is gone), and the
caller then joins the study itself, so no trial is lost. Each trial
records which worker ran it (user attr 'worker').

A worker's configuration (the storage URL among it: with PostgreSQL, its password) and the example inputs reach
it through a pipe on its stdin, and its stderr goes to an unnamed temporary file: nothing a worker needs is ever
a named file, so none is left behind (nor any secret on disk) however the caller ends, SIGKILL included."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna
import torch

from fusionsearch import settings
from fusionsearch.errors import SpecError
from fusionsearch.search.options import SearchOptions, check_workers
from fusionsearch.search.session import run_here
from fusionsearch.search.storage import make_storage

__all__ = ["WorkerExit", "check_workers", "main", "run_workers", "visible_gpus", "worker_count"]


@dataclass(frozen=True)
class WorkerExit:
    """How one worker process ended: its tag ('gpu1', 'cpu0'), exit code, the last lines it wrote to stderr."""

    tag: str
    code: int
    stderr_tail: str


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries (indices or UUIDs), in order."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    listed = list(settings.current().visible_devices)
    return listed[:count] if listed else [str(i) for i in range(count)]


def worker_count(workers: int | str, backend: str) -> int:
    """'auto': one per visible GPU on the gpu backend (one on the CPU backends); else the number given, at most
    the GPUs there are on the gpu backend."""
    check_workers(workers)
    if workers == "auto":
        return max(1, len(visible_gpus())) if backend == "gpu" else 1
    assert isinstance(workers, int)
    if backend == "gpu" and workers > len(visible_gpus()):
        raise SpecError(f"workers={workers}: this machine shows {len(visible_gpus())} GPU(s); one worker a GPU "
                        "(use 'auto')")
    return workers


def run_workers(graph_spec: dict[str, Any], options: SearchOptions, inputs: Sequence[torch.Tensor] | None, count: int,
                backend: str, progress: bool) -> list[WorkerExit]:
    """Start `count` workers on the study named in `options` (its storage laid out already), wait for them all,
    and return how each ended. `options` are the caller's SearchOptions with the shared storage and study."""
    gpus = visible_gpus() if backend == "gpu" else []
    saved = io.BytesIO()
    if inputs is not None:
        torch.save([t.detach().cpu() for t in inputs], saved)
    procs, feeders = [], []
    try:
        for i in range(count):
            tag = f"gpu{gpus[i]}" if gpus else f"cpu{i}"
            # Each worker's sampler draws from its own seed: the same seed would propose the same plans.
            config = {"graph": graph_spec, "options": {
                **dataclasses.asdict(options), "workers": 1, "progress": False, "worker_tag": tag,
                "finalists": 0,  # the caller times the study's finalists once, after every worker is done
                "seed": (options.seed + 1 + i) % 2**32}}
            env = settings.child_environment(**({settings.VISIBLE_DEVICES: gpus[i]} if gpus else {}))
            err = tempfile.TemporaryFile("w+b")  # noqa: SIM115 (closed after the wait; unnamed: nothing to remove)
            proc = subprocess.Popen([sys.executable, "-m", "fusionsearch.search.workers", tag], env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)
            procs.append((tag, err, proc))
            # Fed from a thread: a pipe holds 64 KB, and a worker reads it only once its imports are done.
            feeders.append(threading.Thread(target=_feed, args=(proc, json.dumps(config).encode(), saved.getbuffer()),
                                            daemon=True))
            feeders[-1].start()
        _wait_with_progress([p for _, _, p in procs], options, progress)
        exits = []
        for tag, err, proc in procs:
            err.seek(0)
            tail = "\n".join(err.read().decode(errors="replace").strip().splitlines()[-3:])
            exits.append(WorkerExit(tag, proc.returncode, tail))
    finally:
        for feeder in feeders:
            feeder.join(timeout=1.0)
        for _, err, _ in procs:
            err.close()
    return exits


def _feed(proc: subprocess.Popen[bytes], config: bytes, inputs: memoryview) -> None:
    """Write a worker's stdin: its configuration as one line of JSON, then its example inputs as torch.save wrote
    them (nothing when it has none), then end of file. A worker that died before reading it is reported by its
    exit code, not here."""
    assert proc.stdin is not None
    with contextlib.suppress(OSError):  # BrokenPipeError: the worker is gone
        with proc.stdin:
            proc.stdin.write(config + b"\n")
            proc.stdin.write(inputs)


def _wait_with_progress(procs: list[subprocess.Popen[bytes]], options: SearchOptions, enabled: bool) -> None:
    """Wait for every worker; meanwhile one bar of all the study's finished trials, read from the storage."""
    bar = None
    study = None
    if enabled:
        from fusionsearch.search.progress import bar as progress_bar

        study = optuna.load_study(study_name=options.study_name, storage=make_storage(options.storage))
        bar = progress_bar(options.trials, "trial", f"{len(procs)} workers")
    done = set(optuna.trial.TrialState) - {optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING}
    try:
        while any(p.poll() is None for p in procs):
            if study is not None:
                _show(bar, study, done)
            time.sleep(1.0)
        if study is not None:
            _show(bar, study, done)
    finally:
        if bar is not None:
            bar.close()


def _show(bar: Any, study: optuna.Study, done: set[optuna.trial.TrialState]) -> None:
    trials = study.get_trials(deepcopy=False)
    finished = [t for t in trials if t.state in done]
    values = [t.value for t in finished if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None]
    by_worker: dict[str, int] = {}
    for t in finished:
        tag = str(t.user_attrs.get("worker", "?"))
        by_worker[tag] = by_worker.get(tag, 0) + 1
    if len(finished) == bar.n:
        return
    best = f"best {min(values):.1f} us  " if values else ""
    bar.set_postfix_str(best + " ".join(f"{k} {v}" for k, v in sorted(by_worker.items())))
    bar.n = min(len(finished), bar.total)
    bar.refresh()


def main(argv: Sequence[str] | None = None) -> int:
    """A worker: `python -m fusionsearch.search.workers TAG` reads its configuration and inputs from stdin (as
    run_workers writes them), joins the study and runs trials. TAG only names the process."""
    from fusionsearch.graph.spec import graph_from_dict

    (_tag,) = argv if argv is not None else sys.argv[1:]
    head, _, saved = sys.stdin.buffer.read().partition(b"\n")
    config = json.loads(head)
    inputs = torch.load(io.BytesIO(saved), weights_only=True) if saved else None
    run_here(graph_from_dict(config["graph"]), SearchOptions(**config["options"]), inputs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
