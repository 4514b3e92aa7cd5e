"""Assembling a plan into one Python module: its Triton kernels and `run(*inputs)`, which allocates the
intermediates and launches the kernels in order. The same source runs in-process and when exported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fusionsearch.graph.registry import dtype_name
from fusionsearch.kinds import ModuleContext, kind_of
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.plan import Plan

PRELUDE = '''\
import os

import torch
import triton
import triton.language as tl

try:
    from triton.language.extra import libdevice
except ImportError:  # older Triton
    from triton.language.math import libdevice  # type: ignore

EXTERNS = []


def _quiet_kernels(fn):
    """`fn` with its kernel launches under NumPy's errstate "ignore" when Triton's CPU interpreter runs them: it
    computes every lane with NumPy, masked ones too (loaded as 0, never stored), so 0 / 0 or exp(1000) there
    would warn on the user's stderr, where a GPU raises no floating-point exception (nor does torch for inf or
    NaN in real lanes). Only the launches are quiet: the caller's own warnings still show. On a GPU: `fn`."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return fn
    import functools

    import numpy

    @functools.wraps(fn)
    def quiet(*args, **kwargs):
        with numpy.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return quiet


# The four bytes of each int32 word as the float32s 128 + byte (bytes <= 127): on a GPU a byte permute each
# (PRMT puts the byte under 0x43, 128's exponent); Triton's CPU interpreter runs no inline assembly, so there
# the same values by shifts and masks.
_PRMT = tl.constexpr(os.environ.get("TRITON_INTERPRET") != "1")


@triton.jit
def _low_byte_f32(x):
    return (((x & 255) << 16) | 0x43000000).to(tl.float32, bitcast=True)


@triton.jit
def _bytes_f32(words):
    if _PRMT:
        b0, b1, b2, b3 = tl.inline_asm_elementwise(
            "prmt.b32 $0, $4, 0x43000000, 0x7044; prmt.b32 $1, $4, 0x43000000, 0x7144; "
            "prmt.b32 $2, $4, 0x43000000, 0x7244; prmt.b32 $3, $4, 0x43000000, 0x7344;",
            "=r,=r,=r,=r,r", [words], dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)
    else:
        b0, b1, b2, b3 = (_low_byte_f32(words), _low_byte_f32(words >> 8), _low_byte_f32(words >> 16),
                          _low_byte_f32(words >> 24))
    return b0, b1, b2, b3


def _alloc(shape, dtype, device, poison):
    if not poison:
        return torch.empty(shape, dtype=dtype, device=device)
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    if dtype == torch.bool:
        return torch.zeros(shape, dtype=dtype, device=device)
    return torch.full(shape, torch.iinfo(dtype).max, dtype=dtype, device=device)


class InputError(ValueError):
    """An input unlike those the plan was generated for. Its kernels index with the plan's sizes and element
    types, so running them on it would read (on a GPU: write) memory that is not the input's."""

    def __init__(self, index, detail):
        super().__init__(detail if index is None else f"input {index}: {detail}")
        self.index = index
        self.detail = detail


def _check_inputs(inputs, expected):
    """The inputs' device, once every input has its expected (shape, dtype) and is on the first input's device:
    one pass, as it runs before every call; what is wrong is worked out only when something is."""
    if len(inputs) != len(expected):
        raise InputError(None, f"this plan takes {len(expected)} input tensors, got {len(inputs)}")
    device = getattr(inputs[0], "device", None)
    try:  # a non-tensor fails on .shape: no isinstance test on the way of every good call
        for t, (shape, dtype) in zip(inputs, expected):
            if t.shape != shape or t.dtype is not dtype or t.device != device:
                break
        else:
            return device
    except AttributeError:
        pass
    _refuse(inputs, expected, device)


def _no_bf16_interpreter(device):
    """Triton's CPU interpreter miscomputes bfloat16 arithmetic and dots (relative errors ~1e10): refuse rather
    than hand back numbers known to be wrong."""
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        raise InputError(None, "this plan's Triton kernels compute in bfloat16, which Triton's CPU interpreter "
                               "miscomputes; run it on a GPU, or tune a float16 copy of the graph on the CPU")


def _refuse(inputs, expected, device):
    """Raise the InputError naming the first input that is not as expected, and how."""
    for i, (t, (shape, dtype)) in enumerate(zip(inputs, expected)):
        want = f"shape {list(shape)} {dtype}"
        if not isinstance(t, torch.Tensor):
            raise InputError(i, f"expected a tensor of {want}, got {type(t).__name__}")
        if t.shape != shape or t.dtype != dtype:
            raise InputError(i, f"expected {want}, got {list(t.shape)} {t.dtype}")
        if t.device != device:
            raise InputError(i, f"expected a tensor on {device}, the device of input 0, got {t.device}")
    raise InputError(None, "the inputs are not those this plan was generated for")


_PROGRAMS = {}


def _programs(tiles, device):
    """Programs of a persistent template: at most one per multiprocessor, each looping over its share of the
    tiles (on the CPU, Triton's interpreter, 3, so that programs take several tiles each)."""
    key = (device.type, device.index)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" \
            else 3
    return min(tiles, _PROGRAMS[key])


_SEMAPHORES = {}


def _semaphores(kernel, count, device):
    """A kernel's arrival counters: zeroed once per device and kept, since the kernel leaves them at zero."""
    key = (kernel, device.type, device.index)
    if key not in _SEMAPHORES:
        _SEMAPHORES[key] = torch.zeros(count, dtype=torch.int32, device=device)
    return _SEMAPHORES[key]


_WORKSPACES = {}


def _workspace(kernel, numel, device, dtype=torch.float32):
    """A split-K kernel's fp32 partial tiles (or a grouped matmul's int32 routing table): allocated once per
    device and kept, as cuBLAS keeps its workspace (each call overwrites every entry it reads, in stream order),
    so a call allocates only its outputs. Like the arrival counters, this makes a plan's module not reentrant
    across concurrent streams."""
    key = (kernel, device.type, device.index)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = torch.empty(numel, dtype=dtype, device=device)
    return _WORKSPACES[key]


_INDEX_FLAGS = {}


class IndexOutOfRange(InputError, IndexError):
    """An index input names a row outside the table it gathers from (eager PyTorch's IndexError). No kernel read
    outside the table: each gather clamps its rows into it, and checks them (fusionsearch's tile.check_index)."""


def _index_flag(device):
    """The int32 that a gathering kernel sets where an index is outside its table, one per device; on a CPU
    zeroed at every call (a call that failed after a kernel set it must not fail the next one)."""
    key = (device.type, device.index)
    if key not in _INDEX_FLAGS:
        _INDEX_FLAGS[key] = torch.zeros(1, dtype=torch.int32, device=device)
    elif device.type == "cpu":
        _INDEX_FLAGS[key].zero_()
    return _INDEX_FLAGS[key]


def _index_check(flag):
    """Raise IndexOutOfRange where a kernel of this call set `flag`. Read on a CPU only, where it costs nothing
    and Triton's interpreter runs no device assert; on a GPU the kernels' device assert (debug=True) stops
    them, since reading the flag would wait for the GPU, which a CUDA graph's capture does not allow."""
    if flag.device.type == "cpu" and int(flag[0]):
        flag.zero_()
        raise IndexOutOfRange(None, "an index is out of range of the table it gathers rows from (valid: -rows "
                                    "to rows - 1)")


def _tma_allocator(device):
    """Device-side TMA descriptors live in scratch memory that Triton asks an allocator for: ours (on the
    inputs' device) unless the caller set one. Triton keeps the allocator per thread (a context variable)."""
    from triton.runtime import _allocation

    current = _allocation._allocator.get()
    if current is _allocation._NULL_ALLOCATOR or getattr(current, "fusionsearch_device", device) != device:
        def allocate(size, alignment, stream):
            return torch.empty(size, dtype=torch.int8, device=device)

        allocate.fusionsearch_device = device
        triton.set_allocator(allocate)


# Direct launches. Triton's `kernel[grid](...)` spends ~13 us of host time per launch (Triton 3.6) binding
# and specialising its arguments, more than a small-M kernel takes on the GPU. The first call of `run` for
# a given launch key goes through it and keeps the compiled kernels it returns; later calls with the same key
# hand the same arguments to those kernels' launchers directly. The key holds everything that Triton's
# specialisation reads and that can change between calls: each input's dtype, 16-byte alignment and strides
# (every other buffer is a fresh allocation of fixed shape, contiguous and aligned; sizes are constants).
# FUSIONSEARCH_FAST_LAUNCH=0 turns it off.
_FAST_LAUNCH = os.environ.get("FUSIONSEARCH_FAST_LAUNCH", "1") != "0" and os.environ.get("TRITON_INTERPRET") != "1"
_FAST_DEVICES = ("cuda",)
_LAUNCHED = {}


def _stream(device):
    return triton.runtime.driver.active.get_current_stream(device.index)


def _launch_key(inputs, device):
    """(kernels to launch directly or None, the key to record this call's kernels under or None, the stream)."""
    if not _FAST_LAUNCH or device.type not in _FAST_DEVICES:
        return None, None, None
    key = (device.type, device.index, *[(t.dtype, t.data_ptr() % 16 == 0, t.stride()) for t in inputs])
    fast = _LAUNCHED.get(key)
    if fast is None:
        return None, key, None
    return fast, None, _stream(device)


def _remember(key, launched):
    """Keep the compiled kernels of the launch sites, in order, for direct launches under this key."""
    if key is not None and all(hasattr(k, "packed_metadata") for k in launched):
        _LAUNCHED[key] = [(k.run, k.function, k.packed_metadata) for k in launched]
'''

EXTERN_LOADER = '''

def _load_externs():
    """Resolve the extern ops listed in externs.json beside this file (registered aten overloads only)."""
    import json
    import os
    import re

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "externs.json")
    with open(path) as f:
        specs = json.load(f)

    def decode(value, tensors):
        if isinstance(value, dict) and set(value) == {"input"}:
            return tensors[value["input"]]
        if isinstance(value, dict) and set(value) == {"dtype"}:
            return getattr(torch, value["dtype"])
        if isinstance(value, list):
            return [decode(v, tensors) for v in value]
        return value

    def make(spec):
        # a registered operator overload only, found through the dispatcher and the namespace's own op lookup:
        # a name like 'aten.__setattr__' never reaches Python attributes of torch.ops.aten
        if not re.match(r"^aten\\.[A-Za-z_][A-Za-z0-9_]*\\.[A-Za-z_][A-Za-z0-9_]*$", spec["target"]):
            raise ValueError(f"externs.json: bad target {spec['target']!r}")
        _, name, overload = spec["target"].split(".")
        try:
            torch._C._dispatch_find_schema_or_throw("aten::" + name, "" if overload == "default" else overload)
        except RuntimeError:
            raise ValueError(f"externs.json: {spec['target']!r} is not a registered aten operator") from None
        aten = torch.ops.aten
        packet = vars(aten).get(name)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            packet = type(aten).__getattr__(aten, name)
        op = vars(packet).get(overload)
        if not isinstance(op, torch._ops.OpOverload):
            op = type(packet).__getattr__(packet, overload)

        def call(*tensors):
            out = op(*decode(spec["args"], tensors), **{k: decode(v, tensors) for k, v in spec["kwargs"].items()})
            return out[spec.get("output_index", 0)] if isinstance(out, (tuple, list)) else out

        return call

    EXTERNS[:] = [make(s) for s in specs]
'''


def _launch_lines(gk: GeneratedKernel, args: list[str], site: int, record: bool) -> list[str]:
    """One Triton launch: through `kernel[grid](...)` the first time (kept in `launched` when `record`), then
    straight to the compiled kernel's launcher, `fast[site]`, with the same arguments and the constexprs'
    values in parameter order (the launcher skips them)."""
    meta = [f"{c}={v}" for c, v in gk.constexprs.items()] + [f"num_warps={gk.num_warps}", f"num_stages={gk.num_stages}"]
    if gk.index_flag:  # its gathers' device asserts compiled in, as Inductor compiles its kernels
        meta += ["debug=True", "sanitize_overflow=False"]
    grid = f"({', '.join(map(str, gk.grid))})"  # a persistent template's program count is an expression
    call = f"{gk.name}[{grid}]({', '.join(args + meta)})"
    direct = [*map(str, gk.grid), "stream", "_fn", "_md", "None", "None", "None", *args,
              *map(str, gk.constexprs.values())]
    return ["if fast is None:", f"    {f'launched.append({call})' if record else call}", "else:",
            f"    _run, _fn, _md = fast[{site}]", f"    _run({', '.join(direct)})"]


def _freeing(plan: Plan, body: list[str], starts: list[int], buf: dict[str, str], allocated: set[str]) -> list[str]:
    """`body` with each intermediate buffer deleted after the last kernel that reads it, so the caching
    allocator can reuse its memory within the call (eager PyTorch frees a temporary at its last use; a plan
    holding every intermediate to the end peaks higher: swiglu M2048's three 45 MB intermediates). `steps`
    keeps them all: its per-kernel callables run again over the same buffers."""
    g = plan.graph
    last: dict[str, int] = {}
    for i, k in enumerate(plan.kernels):
        inside = set(k.nodes)
        for n in k.nodes:
            last.setdefault(n, i)  # a value nothing reads again is freed after the kernel writing it
            for src in g.node(n).inputs:
                if src not in inside:
                    last[src] = i
    frees: dict[int, list[str]] = {}
    for n in sorted(allocated - set(g.inputs) - set(g.outputs), key=list(buf).index):
        if n in last:
            frees.setdefault(last[n], []).append(buf[n])
    out: list[str] = []
    for i, begin in enumerate(starts):
        out += body[begin:starts[i + 1] if i + 1 < len(starts) else len(body)]
        if frees.get(i):
            out.append(f"    del {', '.join(frees[i])}")
    return out


def _triton_bf16(plan: Plan) -> bool:
    """Whether a Triton kernel of the plan reads or computes a bfloat16 value."""
    g = plan.graph
    for k in plan.kernels:
        if kind_of(k).runs_triton:
            touched = {n for m in k.nodes for n in (m, *g.node(m).inputs)}
            if any(g.node(n).dtype == torch.bfloat16 for n in touched):
                return True
    return False


@dataclass
class PlanModule:
    """The generated module's source, its kernels, and the extern specs it calls (by position)."""

    source: str
    kernels: list[GeneratedKernel]
    externs: list[dict[str, object]]


def generate_module(plan: Plan, **overrides: Any) -> PlanModule:
    """Generate the whole plan as one module; a pure function of (graph, plan): the plan's CodegenOptions say
    how, and `overrides` (CodegenOptions' names) replace some of them for this call.

    The module has `run(*inputs)` (allocate, launch every step, return the outputs) and `steps(*inputs)`,
    which runs once and returns one callable per plan kernel over the same buffers, to time kernels alone.
    Both first refuse inputs of another count, shape, dtype or device than the graph's (the module's
    `InputError`, a ValueError naming the input's position and what it must be): the kernels would read past them."""
    opts = plan.options.with_overrides(**overrides)  # refuses warp_specialize without persistent
    g = plan.graph
    stored = plan.stored()
    buf = {n: f"buf{i}" for i, n in enumerate(g.topo_order())}
    kernels: list[GeneratedKernel] = []
    externs: list[dict[str, object]] = []
    # Inputs are checked against the graph's shapes and dtypes (by position: no user string enters the source).
    # Their strides are passed to the kernels at each call, so any layout is read correctly, except where a
    # TMA descriptor bakes in a contiguous one (checked below).
    expected = ", ".join(f"({tuple(g.node(n).shape)!r}, torch.{dtype_name(g.node(n).dtype)})" for n in g.inputs)
    head = ["    device = _check_inputs(inputs, _INPUTS)",
            f"    {', '.join(buf[n] for n in g.inputs)}, = inputs",
            "    fast, key, stream = _launch_key(inputs, device)",
            "    launched = []"]
    if _triton_bf16(plan):
        head.insert(1, "    _no_bf16_interpreter(device)")
    ctx = ModuleContext(g, buf, opts, externs)
    body: list[str] = []
    launches: list[list[str]] = []  # per plan kernel, the statements that run it again on the same buffers
    allocated = set(g.inputs)
    starts: list[int] = []  # where each plan kernel's lines begin in `body`
    for i, k in enumerate(plan.kernels):
        starts.append(len(body))
        body.append(f"    # step {i}: {k.kind}")
        code = kind_of(k).generate(ctx, k, stored[i], f"fs_kernel_{i}")
        if code.expression is not None and code.node is not None:  # a PyTorch call (library, extern)
            body.append(f"    {buf[code.node]} = {code.expression}")
            launches.append([code.expression])
            allocated.add(code.node)
            continue
        if not code.triton:
            body.append(f"    # {code.note}")
            launches.append([])
            continue
        step = code.triton
        for n in sorted(stored[i], key=list(buf).index):
            if n not in allocated:
                node = g.node(n)
                dt = f"torch.{dtype_name(node.dtype)}"
                body.append(f"    {buf[n]} = _alloc({tuple(node.shape)!r}, {dt}, device, poison)")
                allocated.add(n)
        scratch = kind_of(k).scratch(step, i)  # what its kernels share beyond the plan's values
        body += [f"    {line}" for line in scratch.lines]
        calls: list[str] = []
        for gk, extra in zip(step, scratch.args, strict=True):
            args = []
            for a in gk.args:
                args.append(buf[a.node])
                if a.strides:
                    args.append(f"*{buf[a.node]}.stride()")
            if gk.index_flag:
                args.append("index_flag")
            args += extra
            body += [f"    {line}" for line in _launch_lines(gk, args, len(kernels), record=True)]
            calls += _launch_lines(gk, args, len(kernels), record=False)
            kernels.append(gk)
        launches.append(calls)
    if externs:
        head += ["    if not EXTERNS:", "        _load_externs()"]
    checked = any(gk.index_flag for gk in kernels)
    if checked:
        head.append("    index_flag = _index_flag(device)")
    # Inputs read other than element by element, checked before any launch (after the inputs are unpacked).
    checks = []
    read_as_words = {a.node for gk in kernels for a in gk.args if a.words}
    for j in [j for j, n in enumerate(g.inputs) if n in read_as_words]:
        b, shape = buf[g.inputs[j]], g.node(g.inputs[j]).shape
        rows = "".join(f" or {b}.stride({d}) % 4" for d in range(len(shape) - 1) if shape[d] > 1)
        checks += [f"    if {b}.data_ptr() % 4 or {b}.stride({len(shape) - 1}) != 1{rows}:",
                   f"        raise ValueError('this plan reads input {j} as 4-byte words: it must be 4-byte "
                   f"aligned, contiguous in its last dim, its other strides multiples of 4')"]
    read_by_tma = {a.node for gk in kernels for a in gk.args if a.tma}
    if read_by_tma:
        checks.append("    _tma_allocator(device)")
        for j in [j for j, n in enumerate(g.inputs) if n in read_by_tma]:
            b, (rows, cols) = buf[g.inputs[j]], g.node(g.inputs[j]).shape
            row_stride = f" or {b}.stride(0) != {cols}" if rows > 1 else ""  # a single row's stride is never used
            checks += [f"    if {b}.data_ptr() % 16 or {b}.stride(1) != 1{row_stride}:",
                       f"        raise ValueError('this plan reads input {j} through a TMA descriptor: it must be "
                       f"contiguous and 16-byte aligned')"]
    at = head.index("    fast, key, stream = _launch_key(inputs, device)")
    head[at:at] = checks
    outputs = f"[{', '.join(buf[o] for o in g.outputs)}]"
    run = ["@_quiet_kernels", "def run(*inputs, poison=False):", *head,
           *_freeing(plan, body, starts, buf, allocated), "    _remember(key, launched)",
           *(["    _index_check(index_flag)"] if checked else []), f"    return {outputs}"]
    steps = ["@_quiet_kernels", "def steps(*inputs, poison=False):",
             '    """Run the plan once, then return (one callable per plan kernel, outputs) over its buffers."""',
             *head, *body, "    _remember(key, launched)", "    if fast is None and key is not None:",
             "        fast, key, stream = _launch_key(inputs, device)"]
    for i, calls in enumerate(launches):
        steps.append("")
        steps += ["    @_quiet_kernels", f"    def step_{i}():"]
        steps += [f"        {c}" for c in calls] or ["        pass"]
    steps.append(f"    return [{', '.join(f'step_{i}' for i in range(len(launches)))}], {outputs}")
    library = sum(kind_of(k).runs_in_library for k in plan.kernels)
    parts = [f"# Generated by fusionsearch for graph {g.signature_hash()}: {len(kernels)} Triton kernels, "
             f"{library} library matmuls, {len(externs)} extern calls.", "# Standalone: needs torch and triton only.",
             PRELUDE]
    if externs:
        parts.append(EXTERN_LOADER)
    parts.append(f"\n# Each input's (shape, dtype), in order.\n_INPUTS = ({expected},)\n")
    parts += ["\n" + gk.source for gk in kernels]
    parts.append("\n" + "\n".join(run) + "\n")
    parts.append("\n" + "\n".join(steps) + "\n")
    return PlanModule("\n".join(parts), kernels, externs)
