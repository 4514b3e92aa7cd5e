"""Evaluating a fused subgraph on a tile: each node's value at an index tuple, as generated Triton lines.

Layout ops are index maps, gathers load their indices first, pointwise ops broadcast; values read from
memory are loaded through stride arguments. The matmul template and pointwise kernels share this."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from fusionsearch.errors import CodegenError
from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.graph.ops_pointwise import promote
from fusionsearch.graph.registry import InputInfo, get_op
from fusionsearch.kinds.triton_source.dtypes import LOW_PRECISION, Value, compute_dtype, convert, tl_dtype
from fusionsearch.kinds.triton_source.emit import Source
from fusionsearch.kinds.triton_source.index_check import INDEX_FLAG, check_index
from fusionsearch.kinds.triton_source.magic import FOLD_MAGIC, MAGIC, nonnegative_bound, small_int_bits
from fusionsearch.kinds.triton_source.tile_index import (
    WORD_BYTES,
    ZERO,
    Idx,
    _broadcast_index,
    _reshape_index,
    _vector_index,
    _word_column,
    mask_of,
)


@dataclass
class BufferArg:
    """A tensor argument of a generated kernel: its pointer and per-dim stride parameter names; `tma` when the
    kernel reads it through a tensor descriptor (which needs it 16-byte aligned, its last dim contiguous)."""

    node: str
    ptr: str
    strides: list[str]
    role: str  # "in" or "out"
    tma: bool = False
    words: bool = False  # read as int32 words (needs it 4-byte aligned, its last dim contiguous, its rows whole words)


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
        self.flagged = False  # a gather checks its indices (check_index): the int32 INDEX_FLAG follows the tensors
        self.checked: set[str] = set()  # index nodes whose values need no check_index here (checked before)

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
        return [p for a in self.args for p in (a.ptr, *a.strides)] + ([INDEX_FLAG] if self.flagged else [])


def offset(arg: BufferArg, index: tuple[Idx, ...]) -> str:
    terms = [f"({c.expr}) * {s}" for c, s in zip(index, arg.strides, strict=True) if c.expr != "0"]
    return " + ".join(terms) if terms else "0"


class TileEvaluator:
    """Generates the value of graph nodes at index tuples of one tile.

    `computed` are the nodes this region computes (the rest are loaded); `seeded` maps a node to a value
    already available at the region's own index (the matmul result in an epilogue). Values that do not
    depend on `loop_tokens` go to `hoist` (before the K loop) when one is given. `vector_loads`: a load whose
    index spans one axis of the 2-D tile (a per-column scale at idx_n[:, None]) is made 1-D, then expanded
    (`_vector_index`). `words`: uint8 nodes read as int32 words where a tile's columns are one byte of each
    word (MatmulTile's `word`); a nibble unpacked from them and cast to a float is made word by word
    (`_words_nibble`). `word_rows`: other values loaded along such a tile's columns (group scales and zeros)
    read as whole contiguous rows, split into the four byte positions in registers (`_row_part`).
    """

    def __init__(self, g: OpGraph, computed: set[str], buffers: Buffers, body: Source, upcast: bool,
                 hoist: Source | None = None, loop_tokens: tuple[str, ...] = (),
                 tiles: TileLoads | None = None, vector_loads: bool = False,
                 words: frozenset[str] = frozenset(), word_rows: bool = False) -> None:
        self.g, self.computed, self.buffers, self.upcast = g, computed, buffers, upcast
        self.body, self.hoist, self.tiles, self.vector_loads = body, hoist, tiles, vector_loads
        self.words, self.word_rows = words, word_rows
        self.memo: dict[tuple[str, tuple[str, ...]], Value] = {}
        self._variant = set(loop_tokens)
        self._descriptors: dict[str, str] = {}
        self._magic: dict[str, tuple[Value, int, int]] = {}  # a small int cast by its bits: (MAGIC + q, MAGIC, bound)
        self._offset: dict[str, tuple[Value, int]] = {}  # (MAGIC + q) - shift in fp32: (the biased value, shift)
        self._scaled: dict[str, tuple[Value, int, Value]] = {}  # ((MAGIC + q) - shift) * s in fp32: (.., s)

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
            source = self._layout_source(n, index)
            v = self.value(*source) if source else self._stack_select(n, index)
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
        j = _word_column(index[-1]) if n in self.words else None
        if j is not None:  # the byte j of each word: torch's value of a uint8 element, for any op that follows
            w = self._word_load(n, index)
            return self._emit("v", f"(({w.name} >> {8 * j}) & 255).to(tl.uint8)", node.dtype, node.dtype,
                              self._is_variant(w.name))
        variant = self._is_variant(*(c.expr for c in index), mask_of(index))
        vector = _vector_index(index) if self.vector_loads else None
        j = _word_column(index[-1]) if self.word_rows and vector else None
        if j is not None and vector is not None:
            return self._row_part(n, vector[0], j, vector[1], variant)
        load_index, expand = vector if vector else (index, "")
        mask = mask_of(load_index)
        args = f"{arg.ptr} + {offset(arg, load_index)}"
        expr = f"tl.load({args}, mask={mask}, other=0)" if mask else f"tl.load({args})"
        return self._emit("ld", expr + expand, node.dtype, node.dtype, variant)

    def _row_part(self, n: str, index: tuple[Idx, ...], j: int, expand: str, variant: bool) -> Value:
        """Byte position j's elements of node `n` along a words tile's columns (its 1-D `index` ends in
        4 * idx_w + j): the row's BLOCK_N contiguous elements loaded once (vector loads, which Triton may also
        stage through cp.async; four loads of every fourth element it can do neither) and split into the four
        positions in registers, the row viewed as [BLOCK_N / 4, 2, 2] (element 4 w + 2 a + b) split on b, then
        on a. The columns 4 * idx_w + (0 .. 3) are written as an arange, so the compiler sees them contiguous
        (idx_w = pid_n * BLOCK_N / 4 + (0 .. BLOCK_N / 4); N a multiple of 4)."""
        key = (f"{n}#row", tuple(c.expr for c in index[:-1]))
        if key not in self.memo:
            head = self.hoist if self.hoist is not None else self.body
            if ("#row_index", ()) not in self.memo:
                cols = head.names.fresh("cols")
                head.line(f"{cols} = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
                self.memo[("#row_index", ())] = Value(cols, torch.int32, torch.int32)
            cols = self.memo[("#row_index", ())].name
            mask = " & ".join(m for m in (mask_of(index[:-1]), f"{cols} < N" if index[-1].mask else None) if m)
            sink = self.body if (variant or self.hoist is None) else self.hoist
            arg, row = self.buffers.get(n), sink.names.fresh("row")
            args = f"{arg.ptr} + {offset(arg, (*index[:-1], Idx(cols)))}"
            sink.line(f"{row} = tl.load({args}, mask={mask}, other=0)" if mask else f"{row} = tl.load({args})")
            half, parts = sink.names.fresh("row_h"), [sink.names.fresh("row_j") for _ in range(WORD_BYTES)]
            sink.line(f"{half}0, {half}1 = tl.split(tl.reshape({row}, (BLOCK_N // 4, 2, 2)))")
            sink.line(f"{parts[0]}, {parts[2]} = tl.split({half}0)")
            sink.line(f"{parts[1]}, {parts[3]} = tl.split({half}1)")
            if variant and self.hoist is not None:
                self._variant.update([row, f"{half}0", f"{half}1", *parts])
            self.memo[key] = Value(",".join(parts), self.g.node(n).dtype, self.g.node(n).dtype)
        parts = self.memo[key].name.split(",")
        return self._emit("ld", f"{parts[j]}{expand}", self.memo[key].dtype, self.memo[key].dtype, variant)

    def _word_load(self, n: str, index: tuple[Idx, ...]) -> Value:
        """The int32 words of uint8 node `n` (contiguous last dim, rows of whole words) under a words tile's
        `index`: one load for the four bytes of each, shared by the tiles of the four byte positions."""
        key = (f"{n}#words", tuple(c.expr for c in index[:-1]))
        if key in self.memo:
            return self.memo[key]
        arg = self.buffers.get(n)
        arg.words = True
        assert index[-1].affine is not None
        column = index[-1].affine.terms[0][0]  # idx_w[None, :] or idx_w[:, None]
        rows = offset(arg, (*index[:-1], ZERO))  # the row's byte offset; the words' column index is added after
        mask = mask_of((*index[:-1], Idx(column, index[-1].mask)))
        ptr = f"({arg.ptr} + {rows}).to(tl.pointer_type(tl.int32)) + {column}"
        expr = f"tl.load({ptr}, mask={mask}, other=0)" if mask else f"tl.load({ptr})"
        v = self._emit("ldw", expr, torch.int32, torch.int32, self._is_variant(rows, mask))
        self.memo[key] = v
        return v

    def _words_nibble(self, n: str, index: tuple[Idx, ...]) -> Value | None:
        """Cast node `n` of a byte of words read by `_word_load`, shifted right and masked (`(b >> s) & c`, the
        int4 unpack), to a float, made from the whole word: the shift and mask once a word (four bytes: the mask
        `(255 >> s) & c` in each byte keeps out what the shift brings in from the next one), then the byte put
        under a float32 exponent of 128 by one byte permute (`_bytes_f32`: 128 + q exactly, q <= 127). The
        float32 instructions a weight element: one permute instead of a shift, a mask and a magic-number OR on a
        byte of its own (the int4 GEMV's K loop 8.16 -> 4.85 SASS instructions an element,
        benchmarks/results/cpu-2026-12-06g-words-sass).
        None where `n` is not such a cast."""
        g, node = self.g, self.g.node(n)
        if not self.words or node.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            return None
        src, idx = self._through_layout(node.inputs[0], index)
        mask_node = g.node(src)
        c = mask_node.attrs.get("scalar")
        if (src not in self.computed or mask_node.op != "bitwise_and" or len(mask_node.inputs) != 1
                or mask_node.dtype != torch.uint8 or isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= 127
                or mask_node.attrs.get("scalar_first")):
            return None
        src, idx = self._through_layout(mask_node.inputs[0], _broadcast_index(g.node(mask_node.inputs[0]).shape,
                                                                              mask_node.shape, idx))
        shift = g.node(src)
        if src in self.words and src not in self.computed:  # the byte itself, masked: a shift by 0 (`w & 15`)
            byte, byte_idx, shift = src, idx, None
        elif src not in self.computed or shift.op != "bitwise_right_shift" or shift.dtype != torch.uint8 or \
                shift.attrs.get("scalar_first"):
            return None
        else:
            byte, byte_idx = self._through_layout(shift.inputs[0], _broadcast_index(g.node(shift.inputs[0]).shape,
                                                                                   shift.shape, idx))
        j = _word_column(byte_idx[-1]) if byte in self.words and byte not in self.computed else None
        if j is None:
            return None
        if shift is None:
            amount_expr = "0"
        elif len(shift.inputs) == 2:
            amount = self.value(shift.inputs[1], _broadcast_index(g.node(shift.inputs[1]).shape, shift.shape, idx))
            a = amount.name
            if ("#shift", (a,)) not in self.memo:  # torch's uint8 >> s: 0 for s outside [0, 8), as s = 8 gives
                self.memo[("#shift", (a,))] = self._emit("sh", f"tl.where(({a} >= 0) & ({a} < 8), {a}, 8)"
                                                         ".to(tl.int32)", torch.int32, torch.int32,
                                                         self._is_variant(a))
            amount_expr = self.memo[("#shift", (a,))].name
        else:
            amount = int(shift.attrs["scalar"])
            amount_expr = str(amount if 0 <= amount < 8 else 8)  # torch's uint8 >> s: 0 for s outside [0, 8)
        w = self._word_load(byte, byte_idx)
        key = (f"{byte}#nibbles", (w.name, amount_expr, str(c)))
        if key not in self.memo:
            keep = f"((255 >> {amount_expr}) & {c}) * {0x01010101}"
            self.memo[key] = self._emit("nib", f"(({w.name} >> {amount_expr}) & ({keep}))", torch.int32, torch.int32,
                                        self._is_variant(w.name, amount_expr))
        words = self.memo[key]
        if (f"{byte}#bytes", (words.name, "0")) not in self.memo:  # all four at once: one asm block, one register
            # for the permute's constant (four apart, ptxas rematerialised it for every element)
            variant = self._is_variant(words.name)
            sink = self.body if (variant or self.hoist is None) else self.hoist
            names = [sink.names.fresh("q") for _ in range(WORD_BYTES)]
            sink.line(f"{', '.join(names)} = _bytes_f32({words.name})")
            if variant and self.hoist is not None:
                self._variant.update(names)
            for i, name in enumerate(names):
                self.memo[(f"{byte}#bytes", (words.name, str(i)))] = Value(name, torch.float32, torch.float32)
        raw = self.memo[(f"{byte}#bytes", (words.name, str(j)))]
        out = self._emit("v", f"({raw.name} - 128.0)", torch.float32, node.dtype, self._is_variant(raw.name))
        self._magic[out.name] = (raw, 128, c)
        return out

    def _through_layout(self, n: str, index: tuple[Idx, ...]) -> tuple[str, tuple[Idx, ...]]:
        """Node `n` followed back through the layout ops this region computes, with the index mapped along."""
        while n in self.computed and self.g.node(n).kind == "layout":
            source = self._layout_source(n, index)
            if source is None:
                break
            n, index = source
        return n, index

    def _layout_source(self, n: str, index: tuple[Idx, ...]) -> tuple[str, tuple[Idx, ...]] | None:
        """The input layout op `n` reads at `index` and its index there. A stack reads one input only where its
        stacked index is a constant (a K parity tile's: the int4 nibble pairs' two shifts, each a constant);
        elsewhere None (`_stack_select` reads them all)."""
        node = self.g.node(n)
        if node.op != "stack":
            return node.inputs[0], self._layout_index(n, index)
        d = node.attrs.get("dim", 0) % len(node.shape)
        c = index[d]
        at = c.affine.const if c.affine is not None and not c.affine.terms else \
            int(c.expr) if c.expr.isdigit() else None
        return None if at is None else (node.inputs[at], (*index[:d], *index[d + 1:]))

    def _stack_select(self, n: str, index: tuple[Idx, ...]) -> Value:
        """Stack `n` where its stacked index varies over the tile: every input's value, selected by it."""
        node = self.g.node(n)
        d = node.attrs.get("dim", 0) % len(node.shape)
        rest = (*index[:d], *index[d + 1:])
        vals = [self.value(x, rest) for x in node.inputs]
        expr = vals[-1].name
        for i in range(len(vals) - 2, -1, -1):
            expr = f"tl.where(({index[d].expr}) == {i}, {convert(vals[i].name, vals[i].dtype, vals[-1].dtype)}, {expr})"
        variant = self._is_variant(index[d].expr, *(v.name for v in vals))
        return self._emit("v", expr, vals[-1].dtype, node.dtype, variant)

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
        variant, lanes = self._is_variant(iv.name), mask_of(index[:ir])
        fixed = self._emit("row", f"tl.where({iv.name} < 0, {iv.name} + {rows}, {iv.name})", iv.dtype, iv.dtype,
                           variant)
        if idx not in self.buffers.checked:
            check_index(self.body if (variant or self.hoist is None) else self.hoist, fixed.name, rows, lanes,
                        self.buffers)
        # Clamped into the table: no index reads outside it (the check reports it), and the loads stay unmasked.
        safe = self._emit("row", f"tl.minimum(tl.maximum({fixed.name}, 0), {rows - 1})", iv.dtype, iv.dtype, variant)
        return self.value(table, (Idx(safe.name, lanes), *index[ir:]))

    def _pointwise(self, n: str, index: tuple[Idx, ...]) -> Value:
        node = self.g.node(n)
        op = get_op(node.op)
        nibble = self._words_nibble(n, index) if node.op == "cast" else None
        if nibble is not None:
            return nibble
        operands = [self.value(src, _broadcast_index(self.g.node(src).shape, node.shape, index))
                    for src in node.inputs]
        variant = any(self._is_variant(v.name) for v in operands)
        if node.op == "cast":
            (v,) = operands
            bound = nonnegative_bound(self.g, node.inputs[0])
            biased = small_int_bits(v.name, v.dtype, node.dtype, bound)
            if biased:
                magic = MAGIC[node.dtype][1]
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
        fused = self._fold_scale(node, operands, cdt, variant)
        if fused is not None:
            return fused
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
        elif node.op == "mul" and cdt == torch.float32 and len(operands) == 2:
            for x, sv in (operands, operands[::-1]):
                if x.name in self._offset:
                    self._scaled[v.name] = (*self._offset[x.name], sv)
                    break
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
        if node.dtype != raw.dtype and not (self.upcast and raw.dtype == torch.float32):
            return None
        shift = magic + (int(c) if node.op == "sub" else -int(c))
        exact = 2 * magic  # the integers up to which the float's mantissa reaches
        if not (0 <= shift <= exact and max(abs(magic - shift), abs(bound + magic - shift)) <= exact):
            return None
        expr = f"({raw.name} - tl.full((), {shift}, {tl_dtype(raw.dtype)}))"
        dtype = raw.dtype
        if self.upcast and raw.dtype in LOW_PRECISION:
            expr, dtype = f"{expr}.to(tl.float32)", torch.float32
        out = self._emit("v", expr, dtype, node.dtype, variant)
        if dtype == torch.float32 and magic <= FOLD_MAGIC:
            self._offset[out.name] = (raw, shift)
        return out

    def _fold_scale(self, node: Node, operands: list[Value], cdt: torch.dtype, variant: bool) -> Value | None:
        """`(MAGIC + q - shift) * s + z` in fp32 as one FMA, `(MAGIC + q) * s + (z - shift * s)`, where `s`
        and `z` span fewer elements than the weight (a group's scale and zero: computed once a column): one
        instruction fewer a weight element. Exact but for the rounding of z - shift * s, within 2^-24 of
        (MAGIC + 16) |s| for MAGIC <= FOLD_MAGIC, far below the weight's own bf16 or fp16 rounding (an infinite
        s gives NaN where the unfolded form may give an infinity). Only the add is made here; the product that
        feeds it is recorded where it is made (`_pointwise`)."""
        if cdt != torch.float32 or len(operands) != 2 or node.attrs.get("alpha", 1) != 1:
            return None
        if node.op == "add":
            for x, z in (operands, operands[::-1]):
                if x.name in self._scaled:
                    raw, shift, sv = self._scaled[x.name]
                    r, sc, zc = (convert(v.name, v.dtype, torch.float32) for v in (raw, sv, z))
                    return self._emit("v", f"({r} * {sc} + ({zc} - {float(shift)!r} * {sc}))", torch.float32,
                                      node.dtype, variant)
        return None

    def store(self, n: str, index: tuple[Idx, ...], v: Value) -> None:
        """Write `v` (node `n`'s value at `index`) to `n`'s output buffer, converted to the graph dtype."""
        arg = self.buffers.get(n, "out")
        mask = mask_of(index)
        data = convert(v.name, v.dtype, self.g.node(n).dtype)
        tail = f", mask={mask}" if mask else ""
        self.body.line(f"tl.store({arg.ptr} + {offset(arg, index)}, {data}{tail})")
