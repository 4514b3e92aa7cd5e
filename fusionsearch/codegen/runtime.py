"""Compiling and running generated plans: the on-disk source cache (keyed by content hash), module loading
(from the verified text in memory: nothing on disk is ever run), the in-process executor and `export`.
Triton's launch lives here and in measure/."""

from __future__ import annotations

import contextlib
import hashlib
import json
import linecache
import os
import shutil
import sys
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from fusionsearch import settings
from fusionsearch.codegen.module import generate_module
from fusionsearch.codegen.outpaths import check_out_dir
from fusionsearch.errors import CodegenError, MeasureError
from fusionsearch.graph.ops_extern import _call as call_extern


def cache_root() -> str:
    """Where fusionsearch keeps what it builds (kernels/, plans/): $FUSIONSEARCH_CACHE_DIR, else
    ~/.cache/fusionsearch."""
    return settings.current().cache_dir


def cache_dir() -> str:
    """Where generated sources live: <cache_root>/kernels."""
    return os.path.join(cache_root(), "kernels")


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Built:
    """A plan's generated module, generated once: the source and its content key (the cache entry's name).
    What crosses to a worker is the key only; the worker reads the entry back through `load_built`."""

    key: str
    source: str


def entry_path(key: str) -> str:
    """The cache file of the source whose content key is `key`."""
    return os.path.join(cache_dir(), f"fs_{key}.py")


def build(plan: Any, **options: Any) -> Built:
    """Generate the plan's module (`options`, CodegenOptions' names, replace the plan's own) and keep its text
    in the cache under its content key: the one generation a candidate gets, handed to whatever compiles,
    validates or times it (compile_plan's `built`)."""
    source = generate_module(plan.with_options(**options)).source
    key = source_key(source)
    _refresh_entry(entry_path(key), source)
    return Built(key, source)


def load_built(key: str) -> Built | None:
    """The source a `build` kept under `key`, read back from the cache only when its text still hashes to the
    key (the key came from the process that generated it, so a file replaced since is never run); None when
    the entry is missing, unreadable or not that text."""
    if len(key) != 24 or any(c not in "0123456789abcdef" for c in key):
        return None
    try:
        with open(entry_path(key), "rb") as f:
            source = f.read().decode()
    except (OSError, UnicodeDecodeError):
        return None
    return Built(key, source) if source_key(source) == key else None


def _write_atomic(path: str, text: str) -> None:
    """Write `text` (UTF-8) to `path` through a temporary file beside it: a reader never sees half of it."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"  # one per writer: processes and threads race here
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # the umask decides, as for open()
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _refresh_entry(path: str, source: str) -> None:
    """Make the cache file at `path` hold exactly `source`: an entry that is missing, another text, not UTF-8 or
    a directory is replaced. Only `path` itself is ever removed (a symlink there is unlinked, not followed).
    The file is for reading and for Triton's JIT to show; what runs is `source`, so a failure here only warns."""
    try:
        with open(path, "rb") as f:
            if f.read() == source.encode():
                return
    except OSError:  # missing, a directory, unreadable
        pass
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write_atomic(path, source)
    except OSError as e:
        warnings.warn(f"kernel cache entry {path} could not be rewritten ({e}); the plan runs from the source "
                      "generated in memory", stacklevel=3)


def load_source(source: str) -> ModuleType:
    """The module of generated `source`, compiled from this text in memory: never imported from the cache, so
    no file there (a tampered entry, a planted __pycache__/*.pyc) is ever run. The cache keeps the text, named
    by its hash, as the module's __file__ (tracebacks and Triton's JIT read the lines: linecache is given the
    text, so they see what runs)."""
    key = source_key(source)
    path = entry_path(key)
    _refresh_entry(path, source)
    mod_name = f"fusionsearch_generated_{key}"
    check_interpreter()
    with _LOADING:  # a module is in sys.modules from before its code runs: another thread must not take it half-made
        if mod_name not in sys.modules:
            _exec_module(mod_name, path, source)
        return sys.modules[mod_name]


_LOADING = threading.Lock()


def check_interpreter() -> None:
    """CodegenError where Triton's interpreter is on but Triton's library was built for a GPU (imported before
    the switch, settings.triton_built_for_gpu): every kernel would fail with Triton's "Cannot call @triton.jit'd
    outside of the scope of a kernel", which does not say what to do."""
    if settings.current().interpret and settings.triton_built_for_gpu():
        raise CodegenError("Triton was imported (by torch.compile, torch._dynamo or `import triton`) before its CPU "
                           "interpreter was switched on, so its library runs only on a GPU: start Python with "
                           "TRITON_INTERPRET=1, or call fusionsearch before anything imports Triton")


def _exec_module(mod_name: str, path: str, source: str) -> None:
    # mtime None: linecache.checkcache keeps the entry whatever the file on disk becomes.
    linecache.cache[path] = (len(source), None, source.splitlines(keepends=True), path)
    module = ModuleType(mod_name)
    module.__file__ = path
    sys.modules[mod_name] = module  # as an import would: Triton's JIT names kernels by their module
    try:
        exec(compile(source, path, "exec", dont_inherit=True), module.__dict__)
    except Exception as e:  # a syntax error here is our bug: name the cache key to reproduce it
        del sys.modules[mod_name]
        raise CodegenError(f"generated source {path} does not load: {e}") from e


@dataclass
class CompiledPlan:
    """A plan ready to run: call it with the graph's inputs; `poison=True` fills outputs with NaN first."""

    plan: Any
    built: Built
    module: ModuleType

    @property
    def source(self) -> str:
        return self.built.source

    @property
    def cache_key(self) -> str:
        return self.built.key

    def source_path(self) -> str:
        """The generated source's file in the cache: what a failure names, to reproduce it."""
        return entry_path(self.cache_key)

    def __call__(self, *inputs: torch.Tensor, poison: bool = False) -> list[torch.Tensor]:
        """The plan's outputs; MeasureError naming the input (position and graph name) and what it must be when
        an input's count, shape, dtype or device is not the plan's (the module checks, once per call)."""
        try:
            return self.module.run(*inputs, poison=poison)
        except self.module.InputError as e:
            if e.index is None:
                raise MeasureError(e.detail) from None
            raise MeasureError(f"input {e.index} ({self.plan.graph.inputs[e.index]}): {e.detail}") from None


def naming_source(reason: str, compiled: CompiledPlan | None) -> str:
    """A failure reason with the generated source it came from (when the plan got that far)."""
    return reason if compiled is None else f"{reason} [generated source: {compiled.source_path()}]"


def _extern_callables(plan: Any) -> list[Any]:
    g = plan.graph
    out = []
    for k in plan.kernels:
        if k.kind == "extern":
            attrs = g.node(k.node).attrs
            out.append(lambda *t, _a=attrs: call_extern(t, _a))
    return out


def compile_plan(plan: Any, built: Built | None = None, **options: Any) -> CompiledPlan:
    """Generate, cache and import the plan's module; externs are bound to the registry's torch calls.
    `options` (CodegenOptions' names) replace the plan's own for this module. `built`: that module generated
    already (`build` of the same plan and options), so nothing is generated again. Without a GPU, its kernels
    run in Triton's interpreter (settings.interpret_without_gpu: the rule of the CLI and of fs.tune)."""
    settings.interpret_without_gpu()
    plan = plan.with_options(**options)
    if built is None:
        built = build(plan)
    elif source_key(built.source) != built.key:
        raise CodegenError(f"generated source {built.key} does not hash to its key: it is not run")
    module = load_source(built.source)
    module.EXTERNS[:] = _extern_callables(plan)
    return CompiledPlan(plan, built, module)


def export_plan(plan: Any, directory: str, **options: Any) -> str:
    """Write `fusionsearch_plan.py` (kernels + run), `plan.json` (with the options it was generated with) and,
    with externs, `externs.json` into `directory`: a new or an empty one, refused as the CLI's --out is."""
    check_out_dir(directory, "export directory")
    plan = plan.with_options(**options)
    generated = generate_module(plan)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "fusionsearch_plan.py")
    _write_atomic(path, generated.source)
    _write_atomic(os.path.join(directory, "plan.json"), plan.to_json() + "\n")
    if generated.externs:
        _write_atomic(os.path.join(directory, "externs.json"), json.dumps(generated.externs, indent=1) + "\n")
    return path


def run_plan(plan: Any, inputs: Sequence[torch.Tensor], **options: Any) -> list[torch.Tensor]:
    return compile_plan(plan, **options)(*inputs)
