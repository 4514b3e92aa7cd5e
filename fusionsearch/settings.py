"""Every environment variable fusionsearch reads, in one frozen value: `current()` reads the environment at the
call, so a test (or a user) that sets a variable sees it at once, and no module keeps a path of its own that
tests would have to patch.

>>> from fusionsearch import settings
>>> s = settings.current({"FUSIONSEARCH_CACHE_DIR": "/tmp/fs", "TRITON_INTERPRET": "1"})
>>> s.cache_dir, s.fast_launch, s.interpret, s.visible_devices
('/tmp/fs', False, True, ())
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

CACHE_DIR = "FUSIONSEARCH_CACHE_DIR"  # where generated kernels, plans and compile records are kept
FAST_LAUNCH = "FUSIONSEARCH_FAST_LAUNCH"  # "0": every launch goes through Triton's kernel[grid](...)
INTERPRET = "TRITON_INTERPRET"  # "1": Triton runs kernels in its CPU interpreter (read by Triton at launch)
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"  # the GPUs a process may use (one per search worker)
MODEL = "FUSIONSEARCH_MODEL"  # the learned cost model a search loads by default (default: the shipped one)
# The learned models shipped: one, pooled over the H100's and the H200's rows (issue 54), the default path; the
# search only loads one (and scikit-learn) when the default file exists, and takes one trained on its device.
_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "datasets", "data")
SHIPPED_MODEL = os.path.join(_DATA, "costmodel.npz")
SHIPPED_MODELS = (SHIPPED_MODEL,)


@dataclass(frozen=True)
class Settings:
    """What the environment asks of fusionsearch. `cache_dir`: the folder it builds into (kernels/, plans/,
    resources/); `fast_launch`: launch compiled kernels directly (off under the interpreter); `interpret`:
    Triton's CPU interpreter is on; `visible_devices`: the CUDA_VISIBLE_DEVICES entries (indices or UUIDs), empty
    when unset; `model_path`: the learned cost model searches load by default."""

    cache_dir: str
    fast_launch: bool
    interpret: bool
    visible_devices: tuple[str, ...]
    model_path: str = SHIPPED_MODEL


def current(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings as the environment (`environ`, else os.environ) holds them now."""
    env = os.environ if environ is None else environ
    interpret = env.get(INTERPRET, "0") not in ("", "0")
    return Settings(
        cache_dir=env.get(CACHE_DIR) or os.path.join(os.path.expanduser("~"), ".cache", "fusionsearch"),
        fast_launch=env.get(FAST_LAUNCH, "1") != "0" and not interpret,
        interpret=interpret,
        visible_devices=tuple(d.strip() for d in env.get(VISIBLE_DEVICES, "").split(",") if d.strip()),
        model_path=env.get(MODEL) or SHIPPED_MODEL)


def child_environment(**overrides: str) -> dict[str, str]:
    """The environment of a worker process: this one's, with this interpreter's import path (tests and scripts
    put their folders on sys.path) and `overrides` (CUDA_VISIBLE_DEVICES="1", TRITON_INTERPRET="0")."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **overrides}


def interpret_without_gpu() -> bool:
    """The one rule for where Triton runs fusionsearch's kernels, which the CLI's commands and the API's entry
    points (fs.tune, fs.capture, tune_model) follow: on a machine without a CUDA GPU, in Triton's CPU interpreter,
    switched on here for the rest of the process; with a GPU, as the environment says. Triton reads the flag
    when it decorates a function, its own library (tl.sum, tl.sigmoid) at `import triton`, which anything making
    fake tensors imports (a capture, an extern op's shape, torch.compile): so the entry points call this before
    any of that. Returns whether the interpreter is on."""
    import torch

    if not torch.cuda.is_available():
        os.environ[INTERPRET] = "1"
    return current().interpret


def triton_built_for_gpu() -> bool:
    """Whether Triton's own library was decorated for a GPU, by an `import triton` before the interpreter was
    switched on: no later switch undoes it, and an interpreted kernel calling it fails ("Cannot call
    @triton.jit'd outside of the scope of a kernel"). False while Triton is not imported."""
    standard = sys.modules.get("triton.language.standard")
    if standard is None:
        return False
    from triton.runtime.jit import JITFunction

    return isinstance(getattr(standard, "sum", None), JITFunction)


@contextlib.contextmanager
def interpreter() -> Iterator[None]:
    """Run Triton in its CPU interpreter for the duration: Triton reads the flag from the environment at launch,
    so it is the one setting fusionsearch writes (and puts back as it was)."""
    old = os.environ.get(INTERPRET)
    os.environ[INTERPRET] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(INTERPRET, None)
        else:
            os.environ[INTERPRET] = old
