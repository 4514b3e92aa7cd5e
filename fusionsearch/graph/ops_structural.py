"""Template (matmul), layout (index maps), indexing (row gathers) and extern (run by PyTorch) ops."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from fusionsearch.errors import GraphError
from fusionsearch.graph.registry import Attrs, InputInfo, OpDef, Shape, register

_INT_INDEX = (torch.int32, torch.int64)


def _same_dtype(op: str, a: InputInfo, b: InputInfo) -> torch.dtype:
    if a.dtype != b.dtype:
        raise GraphError(f"{op} needs operands of one dtype: {a.name} is {a.dtype}, {b.name} is {b.dtype}; cast one")
    if a.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise GraphError(f"{op} supports float16, bfloat16 and float32 operands; {a.name} is {a.dtype}")
    return a.dtype


def _mm_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    a, b = ins
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        raise GraphError(f"mm needs [M,K] @ [K,N]: {a.name} is {list(a.shape)}, {b.name} is {list(b.shape)}")
    return (a.shape[0], b.shape[1])


def _bmm_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    a, b = ins
    if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise GraphError(f"bmm needs [B,M,K] @ [B,K,N]: {a.name} is {list(a.shape)}, {b.name} is {list(b.shape)}")
    return (a.shape[0], a.shape[1], b.shape[2])


def _addmm_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    bias, a, b = ins
    out = _mm_shape([a, b], attrs)
    try:
        if tuple(torch.broadcast_shapes(bias.shape, out)) != out:
            raise RuntimeError
    except RuntimeError:
        raise GraphError(f"addmm bias {bias.name} {list(bias.shape)} does not broadcast to the product "
                         f"{list(out)}") from None
    return out


def _linear_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    x, w = ins[0], ins[1]
    if len(x.shape) < 1 or len(w.shape) != 2 or x.shape[-1] != w.shape[1]:
        raise GraphError(f"linear needs x [...,K] and weight [N,K]: {x.name} is {list(x.shape)}, "
                         f"{w.name} is {list(w.shape)}")
    out = (*x.shape[:-1], w.shape[0])
    if len(ins) == 3:
        try:
            fits = tuple(torch.broadcast_shapes(ins[2].shape, out)) == out
        except RuntimeError:
            fits = False
        if not fits:
            raise GraphError(f"linear bias {ins[2].name} {list(ins[2].shape)} does not broadcast to {list(out)}")
    return out


def _mm_dtype(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    a, b = (ins[1], ins[2]) if len(ins) == 3 and attrs.get("_addmm") else (ins[0], ins[1])
    return _same_dtype("matmul", a, b)


def _addmm_dtype(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    dt = _same_dtype("addmm", ins[1], ins[2])
    if ins[0].dtype != dt:
        raise GraphError(f"addmm bias {ins[0].name} is {ins[0].dtype} but the operands are {dt}; cast the bias")
    return dt


def _linear_dtype(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    dt = _same_dtype("linear", ins[0], ins[1])
    if len(ins) == 3 and ins[2].dtype != dt:
        raise GraphError(f"linear bias {ins[2].name} is {ins[2].dtype} but the operands are {dt}; cast the bias")
    return dt


def _check_alpha_beta(attrs: Attrs) -> None:
    for key in ("alpha", "beta"):
        v = attrs.get(key, 1)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise GraphError(f"addmm attr {key!r} must be a number, got {v!r}")


register(OpDef("mm", "template", (2, 2), _mm_shape, _mm_dtype, lambda t, a: torch.mm(t[0], t[1]),
               doc="A[M,K] @ B[K,N]"))
register(OpDef("bmm", "template", (2, 2), _bmm_shape, _mm_dtype, lambda t, a: torch.bmm(t[0], t[1]),
               doc="A[B,M,K] @ B[B,K,N]"))
register(OpDef("addmm", "template", (3, 3), _addmm_shape, _addmm_dtype,
               lambda t, a: torch.addmm(t[0], t[1], t[2], beta=a.get("beta", 1), alpha=a.get("alpha", 1)),
               attrs_check=_check_alpha_beta, doc="beta * bias + alpha * (A @ B); inputs (bias, A, B)"))
register(OpDef("linear", "template", (2, 3), _linear_shape, _linear_dtype,
               lambda t, a: F.linear(t[0], t[1], t[2] if len(t) == 3 else None),
               doc="x[...,K] @ weight[N,K].T (+ bias[N])"))


# ---- layout: index maps, no data moved -------------------------------------------------------------

def _dim(d: object, rank: int, op: str) -> int:
    if isinstance(d, bool) or not isinstance(d, int) or not -rank <= d < max(rank, 1):
        raise GraphError(f"{op}: dim {d!r} is out of range for rank {rank}")
    return d % rank if rank else 0


def _transpose_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    s = list(ins[0].shape)
    d0, d1 = _dim(attrs.get("dim0", 0), len(s), "transpose"), _dim(attrs.get("dim1", 1), len(s), "transpose")
    s[d0], s[d1] = s[d1], s[d0]
    return tuple(s)


def _permute_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    s = ins[0].shape
    dims = attrs.get("dims")
    if not isinstance(dims, list | tuple) or sorted(_dim(d, len(s), "permute") for d in dims) != list(range(len(s))):
        raise GraphError(f"permute attr 'dims' must be a permutation of 0..{len(s) - 1}, got {dims!r}")
    return tuple(s[_dim(d, len(s), "permute")] for d in dims)


def _resolve_shape(op: str, numel: int, shape: object) -> Shape:
    if not isinstance(shape, list | tuple) or not all(isinstance(v, int) and not isinstance(v, bool) for v in shape):
        raise GraphError(f"{op} attr 'shape' must be a list of integers, got {shape!r}")
    if sum(1 for v in shape if v == -1) > 1 or any(v < -1 for v in shape):
        raise GraphError(f"{op} attr 'shape' {list(shape)} may hold at most one -1 and no other negative size")
    known = math.prod(v for v in shape if v != -1)
    if -1 in shape:
        if known == 0 or numel % known:
            raise GraphError(f"{op}: cannot infer -1 in {list(shape)} for {numel} elements")
        shape = [numel // known if v == -1 else v for v in shape]
    if math.prod(shape) != numel:
        raise GraphError(f"{op}: shape {list(shape)} has {math.prod(shape)} elements, the input has {numel}")
    return tuple(shape)


def _view_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    return _resolve_shape("view", math.prod(ins[0].shape), attrs.get("shape"))


def _expand_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    src, shape = ins[0].shape, attrs.get("shape")
    if not isinstance(shape, list | tuple) or len(shape) < len(src):
        raise GraphError(f"expand attr 'shape' must list at least {len(src)} sizes, got {shape!r}")
    lead = len(shape) - len(src)
    out = []
    for i, v in enumerate(shape):
        have = src[i - lead] if i >= lead else None
        if v == -1 and have is not None:
            v = have
        if not isinstance(v, int) or v < 0 or (have is not None and have not in (1, v)):
            raise GraphError(f"expand: cannot expand {ins[0].name} {list(src)} to {list(shape)}")
        out.append(v)
    return tuple(out)


def _unsqueeze_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    s = list(ins[0].shape)
    d = _dim(attrs.get("dim"), len(s) + 1, "unsqueeze")
    s.insert(d, 1)
    return tuple(s)


def _slice_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    s = list(ins[0].shape)
    d = _dim(attrs.get("dim", 0), len(s), "slice")
    start, end, step = attrs.get("start", 0), attrs.get("end", s[d] if s else 0), attrs.get("step", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end, step)) or step < 1 \
            or not 0 <= start <= end <= s[d]:
        raise GraphError(f"slice of {ins[0].name} {s} on dim {d}: start {start!r}, end {end!r}, step {step!r} must "
                         f"be integers with 0 <= start <= end <= {s[d]} and step >= 1")
    s[d] = -(-(end - start) // step)
    return tuple(s)


def _same(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    return ins[0].dtype


_MAX_STACKED = 16  # a stack's inputs: each tile reads the one its index picks, or all of them where it varies


def _stack_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    s = ins[0].shape
    if any(i.shape != s or i.dtype != ins[0].dtype for i in ins):
        got = ", ".join(f"{i.name} {list(i.shape)} {i.dtype}" for i in ins)
        raise GraphError(f"stack needs inputs of one shape and dtype, got {got}")
    d = _dim(attrs.get("dim", 0), len(s) + 1, "stack")
    return (*s[:d], len(ins), *s[d:])


register(OpDef("transpose", "layout", (1, 1), _transpose_shape, _same,
               lambda t, a: t[0].transpose(a.get("dim0", 0), a.get("dim1", 1)), doc="swap two dims"))
register(OpDef("permute", "layout", (1, 1), _permute_shape, _same, lambda t, a: t[0].permute(*a["dims"]),
               doc="reorder dims"))
register(OpDef("view", "layout", (1, 1), _view_shape, _same, lambda t, a: t[0].reshape(a["shape"]),
               doc="new shape, same elements in row-major order"))
register(OpDef("reshape", "layout", (1, 1), _view_shape, _same, lambda t, a: t[0].reshape(a["shape"]),
               doc="as view"))
register(OpDef("expand", "layout", (1, 1), _expand_shape, _same, lambda t, a: t[0].expand(*a["shape"]),
               doc="broadcast size-1 dims"))
register(OpDef("unsqueeze", "layout", (1, 1), _unsqueeze_shape, _same, lambda t, a: t[0].unsqueeze(a["dim"]),
               doc="insert a size-1 dim"))
register(OpDef("slice", "layout", (1, 1), _slice_shape, _same,
               lambda t, a: t[0].narrow(a.get("dim", 0), a.get("start", 0),
                                        a.get("end", t[0].shape[a.get("dim", 0)]) - a.get("start", 0))
               [(slice(None),) * (a.get("dim", 0) % t[0].dim()) + (slice(None, None, a.get("step", 1)),)],
               doc="x[start:end:step] on dim (attrs dim, start, end, step): x.narrow and basic slices"))
register(OpDef("stack", "layout", (1, _MAX_STACKED), _stack_shape, _same,
               lambda t, a: torch.stack(list(t), a.get("dim", 0)),
               doc="the inputs along a new dim (attr dim): an int4 weight's two nibbles, each by a constant shift"))


# ---- indexing: row gathers -------------------------------------------------------------------------

def _gather_shape(table: InputInfo, idx: InputInfo, op: str, one_d: bool) -> Shape:
    if idx.dtype not in _INT_INDEX:
        raise GraphError(f"{op} indices {idx.name} must be int32 or int64, got {idx.dtype}")
    if len(table.shape) < 1 or (one_d and len(idx.shape) != 1):
        raise GraphError(f"{op}: {table.name} {list(table.shape)} with indices {idx.name} {list(idx.shape)} "
                         "is not a row gather")
    return (*idx.shape, *table.shape[1:])


def _check_dim0(attrs: Attrs) -> None:
    if attrs.get("dim", 0) != 0:
        raise GraphError(f"index_select is supported on dim 0 only (a row gather), got dim {attrs.get('dim')!r}")


register(OpDef("index_select", "indexing", (2, 2), lambda i, a: _gather_shape(i[0], i[1], "index_select", True), _same,
               lambda t, a: torch.index_select(t[0], 0, t[1]), attrs_check=_check_dim0,
               doc="x.index_select(0, idx): inputs (x, idx)"))
register(OpDef("index", "indexing", (2, 2), lambda i, a: _gather_shape(i[0], i[1], "index", False), _same,
               lambda t, a: t[0][t[1]], doc="x[idx]: inputs (x, idx)"))
register(OpDef("embedding", "indexing", (2, 2), lambda i, a: _gather_shape(i[0], i[1], "embedding", False),
               lambda i, a: i[0].dtype, lambda t, a: F.embedding(t[1], t[0]),
               doc="weight[idx]: inputs (weight, idx)"))
