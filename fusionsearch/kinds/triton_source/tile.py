"""Evaluating a fused subgraph on a tile: each node's value at an index tuple, as generated Triton lines.

Layout ops are index maps, gathers load their indices first, pointwise ops broadcast; values read from
memory are loaded through stride arguments. The matmul template and pointwise kernels share this."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from fusionsearch.errors import CodegenError
from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.graph.ops_pointwise import promote
from fusionsearch.graph.registry import InputInfo, get_op
from fusionsearch.kinds.triton_source.dtypes import LOW_PRECISION, Value, compute_dtype, convert, tl_dtype
from fusionsearch.kinds.triton_source.emit import Source


@dataclass(frozen=True)
class Affine:
    """An index known as a sum of scaled variables, each in [0, extent), plus a constant: what lets a reshape
    split it by a divisor without dividing per element. The decode matmul's nibble-pair form reads K as
    k = kb * BLOCK_K + 2 * kp + parity, so the nibble unpack's k // 2 and k % 2 become kb * BLOCK_K / 2 + kp and
    the parity, and a group scale's k // G (G a multiple of BLOCK_K) the scalar kb // (G / BLOCK_K)."""

    terms: tuple[tuple[str, int, int], ...]  # (Triton expression, coefficient, extent)
    const: int = 0

    def span(self) -> int:
        """The largest value the index takes."""
        return sum(c * (e - 1) for _, c, e in self.terms) + self.const

    def expr(self) -> str:
        parts = [v if c == 1 else f"{v} * {c}" for v, c, e in self.terms if e > 1]
        if self.const or not parts:
            parts.append(str(self.const))
        return parts[0] if len(parts) == 1 else f"({' + '.join(parts)})"

    def scaled(self, factor: int) -> Affine:
        return Affine(tuple((v, c * factor, e) for v, c, e in self.terms), self.const * factor)

    def plus(self, other: Affine) -> Affine:
        return Affine(self.terms + other.terms, self.const + other.const)

    def divmod(self, d: int) -> tuple[Affine, Affine] | None:
        """(self // d, self % d) as Affines, or None when the terms do not split at d: every term's coefficient
        a multiple of d (it goes to the quotient) or below d (the remainder), a term whose coefficient divides d
        cut into its quotient and remainder digits, and the remainder's span below d."""
        high: list[tuple[str, int, int]] = []
        low: list[tuple[str, int, int]] = []
        for v, c, e in self.terms:
            if c % d == 0:
                high.append((v, c // d, e))
            elif d % c == 0 and e > d // c:
                r = d // c
                high.append((f"({v}) // {r}", 1, -(-e // r)))
                low.append((f"({v}) % {r}", c, r))
            else:
                low.append((v, c, e))
        rem = Affine(tuple(low), self.const % d)
        if rem.span() >= d:
            return None
        return Affine(tuple(high), self.const // d), rem


@dataclass(frozen=True)
class Idx:
    """One index component: a Triton expression broadcastable to the tile ('0' for a broadcast dim) and the
    mask that bounds it (None when always in range); `affine` where its value is known term by term."""

    expr: str
    mask: str | None = None
    affine: Affine | None = None

    @staticmethod
    def of(a: Affine, mask: str | None = None) -> Idx:
        return Idx(a.expr(), mask, a)


ZERO = Idx("0")


@dataclass
class BufferArg:
    """A tensor argument of a generated kernel: its pointer and per-dim stride parameter names; `tma` when the
    kernel reads it through a tensor descriptor (which needs it 16-byte aligned, its last dim contiguous)."""

    node: str
    ptr: str
    strides: list[str]
    role: str  # "in" or "out"
    tma: bool = False


@dataclass(frozen=True)
class TileLoads:
    """Operand tiles read through a TMA tensor descriptor (Hopper's bulk copy engine) instead of pointer loads:
    a 2-D tensor loaded at exactly `index` (the operand's tile: its rows and columns, one block each) gets a
    descriptor of `block` made before the K loop and is read at `offsets`. The tensor must be contiguous in
    its last dim with rows a multiple of 16 bytes (known from the graph) and 16-byte aligned (checked when
    the plan runs); out-of-range rows and columns read as zero, as the masked loads' `other=0` did."""

    index: tuple[Idx, ...]
    block: tuple[str, str]
    offsets: tuple[str, str]
    transposed: bool = False  # the tensor is [cols, rows] of the tile (a linear's [N, K] weight): load, then .T

    def takes(self, node: object, index: tuple[Idx, ...]) -> bool:
        shape, strides, dtype = node.shape, node.strides, node.dtype  # type: ignore[attr-defined]
        return (index == self.index and len(shape) == 2 and tuple(strides) == (shape[1], 1)
                and shape[1] * dtype.itemsize % 16 == 0)

    def descriptor(self, arg: BufferArg, shape: tuple[int, ...]) -> str:
        return (f"tl.make_tensor_descriptor({arg.ptr}, shape=[{shape[0]}, {shape[1]}], strides=[{shape[1]}, 1], "
                f"block_shape=[{', '.join(self.block)}])")


class Buffers:
    """The kernel's tensor arguments in order of first use, named by generated identifiers."""

    def __init__(self, g: OpGraph) -> None:
        self.g = g
        self.args: list[BufferArg] = []
        self._by_key: dict[tuple[str, str], BufferArg] = {}

    def get(self, node: str, role: str = "in") -> BufferArg:
        key = (node, role)
        if key not in self._by_key:
            i = len(self.args)
            prefix = f"{role}{i}"
            rank = len(self.g.node(node).shape)
            arg = BufferArg(node, f"{prefix}_ptr", [f"{prefix}_s{d}" for d in range(rank)], role)
            self.args.append(arg)
            self._by_key[key] = arg
        return self._by_key[key]

    def params(self) -> list[str]:
        return [p for a in self.args for p in (a.ptr, *a.strides)]


def offset(arg: BufferArg, index: tuple[Idx, ...]) -> str:
    terms = [f"({c.expr}) * {s}" for c, s in zip(index, arg.strides, strict=True) if c.expr != "0"]
    return " + ".join(terms) if terms else "0"


def mask_of(index: tuple[Idx, ...]) -> str | None:
    masks: list[str] = []
    for c in index:
        if c.mask and c.mask not in masks:
            masks.append(c.mask)
    return " & ".join(f"({m})" for m in masks) if masks else None


class TileEvaluator:
    """Generates the value of graph nodes at index tuples of one tile.

    `computed` are the nodes this region computes (the rest are loaded); `seeded` maps a node to a value
    already available at the region's own index (the matmul result in an epilogue). Values that do not
    depend on `loop_tokens` go to `hoist` (before the K loop) when one is given. `vector_loads`: a load whose
    index spans one axis of the 2-D tile (a per-column scale at idx_n[:, None]) is made 1-D, then expanded
    (`_vector_index`).
    """

    def __init__(self, g: OpGraph, computed: set[str], buffers: Buffers, body: Source, upcast: bool,
                 hoist: Source | None = None, loop_tokens: tuple[str, ...] = (),
                 tiles: TileLoads | None = None, vector_loads: bool = False) -> None:
        self.g, self.computed, self.buffers, self.upcast = g, computed, buffers, upcast
        self.body, self.hoist, self.tiles, self.vector_loads = body, hoist, tiles, vector_loads
        self.memo: dict[tuple[str, tuple[str, ...]], Value] = {}
        self._variant = set(loop_tokens)
        self._descriptors: dict[str, str] = {}
        self._magic: dict[str, tuple[Value, int, int]] = {}  # a small int cast by its bits: (MAGIC + q, MAGIC, bound)

    def seed(self, node: str, index: tuple[Idx, ...], value: Value) -> None:
        self.memo[(node, tuple(c.expr for c in index))] = value

    # ---- emission ------------------------------------------------------------------------------
    def _is_variant(self, *exprs: str | None) -> bool:
        if not self._variant:
            return False
        text = " ".join(e for e in exprs if e)
        return any(re.search(rf"\b{re.escape(tok)}\b", text) for tok in self._variant)

    def _emit(self, prefix: str, expr: str, dtype: torch.dtype, logical: torch.dtype, variant: bool) -> Value:
        sink = self.body if (variant or self.hoist is None) else self.hoist
        name = sink.names.fresh(prefix)
        sink.line(f"{name} = {expr}")
        if variant and self.hoist is not None:
            self._variant.add(name)
        return Value(name, dtype, logical)

    # ---- values --------------------------------------------------------------------------------
    def value(self, n: str, index: tuple[Idx, ...]) -> Value:
        key = (n, tuple(c.expr for c in index))
        if key in self.memo:
            return self.memo[key]
        node = self.g.node(n)
        if len(index) != len(node.shape):
            raise CodegenError(f"internal: index of rank {len(index)} for a rank-{len(node.shape)} value")
        if n not in self.computed:
            v = self._load(n, index)
        elif node.kind == "layout":
            v = self.value(node.inputs[0], self._layout_index(n, index))
        elif node.kind == "indexing":
            v = self._gather(n, index)
        elif node.kind == "pointwise":
            v = self._pointwise(n, index)
        else:
            raise CodegenError(f"a {node.op} result cannot be evaluated at another tile's index inside this kernel")
        self.memo[key] = v
        return v

    def _load(self, n: str, index: tuple[Idx, ...]) -> Value:
        node = self.g.node(n)
        arg = self.buffers.get(n)
        if self.tiles is not None and self.hoist is not None and self.tiles.takes(node, index):
            if n not in self._descriptors:
                self._descriptors[n] = self.hoist.names.fresh("desc")
                self.hoist.line(f"{self._descriptors[n]} = {self.tiles.descriptor(arg, node.shape)}")
            arg.tma = True
            expr = f"{self._descriptors[n]}.load([{', '.join(self.tiles.offsets)}])" + (".T" if self.tiles.transposed
                                                                                      else "")
            return self._emit("ld", expr, node.dtype, node.dtype, True)
        variant = self._is_variant(*(c.expr for c in index), mask_of(index))
        vector = _vector_index(index) if self.vector_loads else None
        load_index, expand = vector if vector else (index, "")
        mask = mask_of(load_index)
        args = f"{arg.ptr} + {offset(arg, load_index)}"
        expr = f"tl.load({args}, mask={mask}, other=0)" if mask else f"tl.load({args})"
        return self._emit("ld", expr + expand, node.dtype, node.dtype, variant)

    def _layout_index(self, n: str, index: tuple[Idx, ...]) -> tuple[Idx, ...]:
        node = self.g.node(n)
        src = self.g.node(node.inputs[0])
        a = node.attrs
        if node.op == "transpose":
            d0, d1 = a.get("dim0", 0) % len(src.shape), a.get("dim1", 1) % len(src.shape)
            out = list(index)
            out[d0], out[d1] = index[d1], index[d0]
            return tuple(out)
        if node.op == "permute":
            res: list[Idx] = [ZERO] * len(src.shape)
            for i, d in enumerate(a["dims"]):
                res[d % len(src.shape)] = index[i]
            return tuple(res)
        if node.op == "unsqueeze":
            d = a["dim"] % len(node.shape)
            return index[:d] + index[d + 1:]
        if node.op == "expand":
            lead = len(node.shape) - len(src.shape)
            return tuple(ZERO if src.shape[j] == 1 and node.shape[j + lead] != 1 else index[j + lead]
                         for j in range(len(src.shape)))
        if node.op in ("view", "reshape"):
            return _reshape_index(node.shape, src.shape, index)
        if node.op == "slice":  # the source element start + step * i of dim d; in range wherever i is
            d = a.get("dim", 0) % len(src.shape)
            start, step = int(a.get("start", 0)), int(a.get("step", 1))
            moved = Idx(f"({start} + {step} * ({index[d].expr}))", index[d].mask)
            return (*index[:d], moved, *index[d + 1:])
        raise CodegenError(f"no index map for layout op {node.op}")

    def _gather(self, n: str, index: tuple[Idx, ...]) -> Value:
        node = self.g.node(n)
        table, idx = node.inputs
        ir = len(self.g.node(idx).shape)
        iv = self.value(idx, index[:ir])
        rows = self.g.node(table).shape[0]
        # Negative indices count from the end, as in torch.
        fixed = self._emit("row", f"tl.where({iv.name} < 0, {iv.name} + {rows}, {iv.name})", iv.dtype, iv.dtype,
                           self._is_variant(iv.name))
        row = Idx(fixed.name, mask_of(index[:ir]))
        return self.value(table, (row, *index[ir:]))

    def _pointwise(self, n: str, index: tuple[Idx, ...]) -> Value:
        node = self.g.node(n)
        op = get_op(node.op)
        operands = [self.value(src, _broadcast_index(self.g.node(src).shape, node.shape, index))
                    for src in node.inputs]
        variant = any(self._is_variant(v.name) for v in operands)
        if node.op == "cast":
            (v,) = operands
            bound = _nonnegative_bound(self.g, node.inputs[0])
            biased = _small_int_bits(v.name, v.dtype, node.dtype, bound)
            if biased:
                magic = _MAGIC[node.dtype][1]
                raw = self._emit("v", biased, node.dtype, node.dtype, variant)
                expr = f"({raw.name} - tl.full((), {magic}, {tl_dtype(node.dtype)}))"
            else:
                expr = convert(v.name, v.dtype, node.dtype)
            dtype = node.dtype
            if self.upcast and node.dtype in (torch.float16, torch.bfloat16):
                expr, dtype = f"{expr}.to(tl.float32)", torch.float32  # keep the rounding, compute on in fp32
            out = self._emit("v", expr, dtype, node.dtype, variant)
            if biased and bound is not None:  # biased implies a bound; spelled out for the type checker
                self._magic[out.name] = (raw, magic, bound)
            return out
        folded = self._fold_offset(node, operands, variant)
        if folded:
            return folded
        if node.dtype == torch.bool:  # comparisons: compute in the operands' promoted dtype
            infos = [InputInfo(src, self.g.node(src).shape, self.g.node(src).dtype) for src in node.inputs]
            cdt = promote(infos, node.attrs)
            cdt = compute_dtype(cdt, False, self.upcast)
        else:
            cdt = compute_dtype(node.dtype, op.needs_fp32, self.upcast)
        args = []
        for slot, v in enumerate(operands):
            keep_bool = node.op == "where" and slot == 0
            args.append(v.name if keep_bool else convert(v.name, v.dtype, cdt))
        expr = op.triton(args, node.attrs)  # type: ignore[misc]
        result_dtype = torch.bool if node.dtype == torch.bool else cdt
        if result_dtype in LOW_PRECISION:
            # Triton divides fp16 in fp32 and promotes tl.maximum/minimum against a float literal to fp32:
            # pin the dtype the value is tracked with (tl.dot refuses mixed operands).
            expr = f"{expr}.to({tl_dtype(result_dtype)})"
        v = self._emit("v", expr, result_dtype, node.dtype, variant)
        if result_dtype != node.dtype and not (self.upcast and result_dtype == torch.float32
                                               and node.dtype in (torch.float16, torch.bfloat16)):
            v = self._emit("v", convert(v.name, result_dtype, node.dtype), node.dtype, node.dtype, variant)
        return v

    def _fold_offset(self, node: Node, operands: list[Value], variant: bool) -> Value | None:
        """`q + c` or `q - c` (c an integer scalar) of a small int cast by its bits as one subtraction from the
        biased value, MAGIC + q - (MAGIC -+ c), where every value is an integer the float holds exactly: the
        same bits as the cast then the offset (the int4 unpack's -8), one instruction fewer a weight pair."""
        c = node.attrs.get("scalar")
        if (node.op not in ("add", "sub") or len(operands) != 1 or node.attrs.get("scalar_first")
                or operands[0].name not in self._magic or isinstance(c, bool) or not isinstance(c, (int, float))
                or not float(c).is_integer()):
            return None
        raw, magic, bound = self._magic[operands[0].name]
        if node.dtype != raw.dtype:
            return None
        shift = magic + (int(c) if node.op == "sub" else -int(c))
        exact = 2 * magic  # the integers up to which the float's mantissa reaches
        if not (0 <= shift <= exact and max(abs(magic - shift), abs(bound + magic - shift)) <= exact):
            return None
        expr = f"({raw.name} - tl.full((), {shift}, {tl_dtype(raw.dtype)}))"
        dtype = raw.dtype
        if self.upcast and raw.dtype in LOW_PRECISION:
            expr, dtype = f"{expr}.to(tl.float32)", torch.float32
        return self._emit("v", expr, dtype, node.dtype, variant)

    def store(self, n: str, index: tuple[Idx, ...], v: Value) -> None:
        """Write `v` (node `n`'s value at `index`) to `n`'s output buffer, converted to the graph dtype."""
        arg = self.buffers.get(n, "out")
        mask = mask_of(index)
        data = convert(v.name, v.dtype, self.g.node(n).dtype)
        tail = f", mask={mask}" if mask else ""
        self.body.line(f"tl.store({arg.ptr} + {offset(arg, index)}, {data}{tail})")


# Floats whose bits OR'd onto a small non-negative integer q give MAGIC + q exactly: (bits, MAGIC, the integer
# dtype the bits are built in, the largest q).
_MAGIC: dict[torch.dtype, tuple[int, int, torch.dtype, int]] = {
    torch.bfloat16: (0x4300, 128, torch.int16, 127),
    torch.float16: (0x6400, 1024, torch.int16, 1023),
    torch.float32: (0x4B000000, 1 << 23, torch.int32, (1 << 23) - 1),
}
_INTEGER_BOUNDS = {torch.uint8: 255, torch.bool: 1}


def _nonnegative_bound(g: OpGraph, n: str) -> int | None:
    """The largest value of integer node `n` where it is known never negative (x & m with m >= 0, any uint8);
    else None. Layout ops (a view of the nibbles) move values without changing them."""
    node = g.node(n)
    while node.kind == "layout":
        node = g.node(node.inputs[0])
    scalar = node.attrs.get("scalar")
    if node.op == "bitwise_and" and len(node.inputs) == 1 and not isinstance(scalar, bool) and isinstance(
            scalar, int) and 0 <= scalar:
        return min(scalar, _INTEGER_BOUNDS.get(node.dtype, scalar))
    return _INTEGER_BOUNDS.get(node.dtype)


def _small_int_bits(expr: str, src: torch.dtype, dst: torch.dtype, bound: int | None) -> str | None:
    """An integer q in [0, bound] as the `dst` float MAGIC + q, made by OR'ing its bits onto MAGIC's: less
    MAGIC, it is q converted without an int-to-float instruction (a quarter-rate one on sm_90: one per int4
    weight element). Exact, as the conversion is, for q within the mantissa's reach; None where q's range
    is not known to be."""
    if bound is None or dst not in _MAGIC or src.is_floating_point or src == torch.bool:
        return None
    bits, _, int_dtype, largest = _MAGIC[dst]
    if bound > largest:
        return None
    it, ft = tl_dtype(int_dtype), tl_dtype(dst)
    return f"({expr}.to({it}) | tl.full((), {bits}, {it})).to({ft}, bitcast=True)"


_SCALARS = {"pid_b", "pid_m", "pid_n", "pid_k", "kb"}  # the names a tile's index uses that are scalars
_AXIS = re.compile(r"^([A-Za-z_]\w*)(\[:, None\]|\[None, :\])$")


def _vector_index(index: tuple[Idx, ...]) -> tuple[tuple[Idx, ...], str] | None:
    """`index` as 1-D (each tile-axis component `v[:, None]` read as `v`, scalars kept) and the expansion that
    puts the loaded vector back on its axis, when every component that spans the tile spans the same one axis
    as a plain variable (its mask too); else None. Why: a [BN, 1] load gets a layout of its own, and a
    product of it with a dot operand is then computed in that layout and moved to the operand's through shared
    memory every K step (the generated w8 decode kernel stored each dequantised weight element to shared memory
    and read it back); a 1-D load expanded follows the operand's layout in registers."""
    axis, out = None, []
    for c in index:
        m = _AXIS.match(c.expr)
        if m is None:
            if c.mask or not set(re.findall(r"[A-Za-z_]\w*", c.expr)) <= _SCALARS:
                return None  # a gathered row, a loaded value: a tile of its own
            out.append(c)  # a scalar: the batch, a group row
            continue
        mask = _AXIS.match(c.mask) if c.mask else None
        if (axis or m[2]) != m[2] or (c.mask and (mask is None or mask[2] != m[2])):
            return None
        axis = m[2]
        out.append(Idx(m[1], mask[1] if mask else None))
    return (tuple(out), axis) if axis else None


def _broadcast_index(src: tuple[int, ...], out: tuple[int, ...], index: tuple[Idx, ...]) -> tuple[Idx, ...]:
    """torch broadcasting as an index map: leading dims dropped, size-1 dims read at 0."""
    lead = len(out) - len(src)
    return tuple(ZERO if src[j] == 1 and out[j + lead] != 1 else index[j + lead] for j in range(len(src)))


def _reshape_index(out: tuple[int, ...], src: tuple[int, ...], index: tuple[Idx, ...]) -> tuple[Idx, ...]:
    """Row-major reshape as an index map: linearise the output index, split it over the source dims."""
    if out == src:
        return index
    # Dims of equal size at either end map straight through (row-major): only the middle is linearised, so the
    # index of a kept last dim stays its own (no division by a size that is not a power of two per element, and
    # a reshape of the rows stays free of the K loop's index).
    if out and src and out[-1] == src[-1]:
        return (*_reshape_index(out[:-1], src[:-1], index[:-1]), index[-1])
    if out and src and out[0] == src[0]:
        return (index[0], *_reshape_index(out[1:], src[1:], index[1:]))
    # A last dim that several of the output's rows fill (the pairs of a mixture-of-experts layer, [2T, H] read
    # from [T, 2H]): the rows split over the source's leading dims and a factor, the last index stays added.
    if len(out) > 1 and src and out[-1] > 1 and src[-1] % out[-1] == 0:
        inner = _reshape_index(out[:-1], (*src[:-1], src[-1] // out[-1]), index[:-1])
        last = Idx(f"(({inner[-1].expr}) * {out[-1]} + ({index[-1].expr}))", mask_of((inner[-1], index[-1])))
        return (*inner[:-1], last)
    # Only the masks of the components the linear index uses: the others (size-1 dims) do not move the load, and
    # a block mask on a scalar pointer (every used component scalar, as pid_b) is refused by tl.load.
    masks = mask_of(tuple(c for size, c in zip(out, index, strict=True) if c.expr != "0" and size != 1))
    if any(c.affine is not None for c in index):
        split = _reshape_affine(out, src, index, masks)
        if split is not None:
            return split
    terms, stride = [], 1
    for size, c in zip(reversed(out), reversed(index), strict=True):
        if c.expr != "0" and size != 1:
            terms.append(f"({c.expr}) * {stride}" if stride != 1 else f"({c.expr})")
        stride *= size
    linear = " + ".join(reversed(terms)) if terms else "0"
    res, inner = [], math.prod(src)
    for size in src:
        inner //= max(size, 1)
        if size == 1:
            res.append(ZERO)
            continue
        expr = f"(({linear}) // {inner})" if inner != 1 else f"({linear})"
        res.append(Idx(f"({expr} % {size})", masks))
    return tuple(res)


def _reshape_affine(out: tuple[int, ...], src: tuple[int, ...], index: tuple[Idx, ...], masks: str | None
                    ) -> tuple[Idx, ...] | None:
    """The row-major reshape of an index with Affine components, digit by digit (no per-element division where
    the digits line up); None where some source dim's digit does not split, and the caller linearises."""
    linear, stride = Affine(()), 1
    for size, c in zip(reversed(out), reversed(index), strict=True):
        if c.expr != "0" and size != 1:
            part = c.affine or Affine(((c.expr, 1, size),))
            linear = linear.plus(part.scaled(stride))
        stride *= size
    res: list[Idx] = []
    inner = math.prod(src)
    for size in src:
        inner //= max(size, 1)
        if size == 1:
            res.append(ZERO)
            continue
        quotient = linear.divmod(inner)
        if quotient is None:
            return None
        digit = quotient[0]
        if digit.span() >= size:
            wrapped = digit.divmod(size)
            if wrapped is None:
                return None
            digit = wrapped[1]
        res.append(Idx.of(digit, masks))
    return tuple(res)
