"""The aten-to-registry mapping of a traced program: each aten call of the fx graph make_fx gives becomes a
registry op (pointwise, structural, bitwise, casts, views), a 0-dim constant folded into a scalar attr, or an extern
node that PyTorch runs; in-place writes of the inputs are kept as mutations. graph/capture.py traces; this maps."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from fusionsearch.errors import GraphError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.ops_extern import encode_arg
from fusionsearch.graph.registry import dtype_name, get_op

Scalar = bool | int | float


@dataclass(frozen=True)
class _Const:
    """A 0-dim constant (scalar_tensor, a literal tensor): kept as a number so it can become a 'scalar' attr."""

    value: Scalar
    dtype: torch.dtype


@dataclass(frozen=True)
class _Multi:
    """A multi-output aten call; each getitem of it becomes its own extern node with 'output_index'."""

    node: fx.Node


Value = str | _Const | _Multi

_IDENTITY = {"clone", "contiguous", "alias", "detach", "lift_fresh", "lift_fresh_copy"}
_UNARY = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu", "silu"}
_BINARY = {"add", "sub", "mul", "div", "maximum", "minimum", "pow", "gt", "ge", "lt", "le", "eq", "ne"}
# aten's names for the bitwise ops (x & y traces as bitwise_and, x >> y as __rshift__) and their registry op.
_BITWISE = {"bitwise_and": "bitwise_and", "__and__": "bitwise_and", "bitwise_or": "bitwise_or", "__or__": "bitwise_or",
            "bitwise_right_shift": "bitwise_right_shift", "__rshift__": "bitwise_right_shift",
            "bitwise_left_shift": "bitwise_left_shift", "__lshift__": "bitwise_left_shift"}
_CASTS = {"_to_copy", "to", "convert_element_type"}
_VIEWS = {"view", "_unsafe_view", "reshape"}


def _refuse_data_dependent(node: fx.Node, op: str, args: Sequence[Any]) -> None:
    """GraphError naming what the user wrote where a value depends on a tensor's contents: a Python number read
    from a tensor (`.item()`, float(t)), or an op whose output size depends on the values (nonzero). A kernel
    plan is fixed by shapes alone, so neither can be captured; the aten name alone would not say why."""
    if op == "_local_scalar_dense":
        src = args[0]
        of = f"the result of {src.target.overloadpacket.__name__}" if isinstance(src, fx.Node) and isinstance(
            src.target, torch._ops.OpOverload) else "an input"
        raise GraphError(f"cannot capture `.item()` (or float(), int(), bool()) of a tensor ({of}): a Python number "
                         "read from a tensor's values is data-dependent; keep it a tensor (`t.max()`, not "
                         "`t.max().item()`)")
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and not all(isinstance(d, int) for d in val.shape):
        raise GraphError(f"cannot capture {op}: the size of its output depends on its input's values "
                         "(data-dependent); only ops whose output sizes follow from input sizes can be captured")


def _args(node: fx.Node) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """An fx node's arguments, typed loosely: aten schemas mix tensors, numbers and lists."""
    return tuple(node.args), dict(node.kwargs)


def _leaves(value: object) -> list[object]:
    """The leaves of a returned (nested) tuple/list/dict, in order."""
    if isinstance(value, list | tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    return [value]


def _cast_dtype(node: fx.Node) -> torch.dtype | None:
    """The target dtype of _to_copy (kwarg), to.dtype and convert_element_type (positional); None if unchanged."""
    args, kw = _args(node)
    dtype = kw.get("dtype")
    return args[1] if dtype is None and len(args) > 1 and isinstance(args[1], torch.dtype) else dtype


def _category(dtype: torch.dtype) -> int:
    return 0 if dtype == torch.bool else 2 if dtype.is_floating_point else 1


def _foldable(const: _Const, tensor_dtypes: Sequence[torch.dtype]) -> bool:
    """True when a 0-dim constant promotes like the Python number it holds: its dtype is the number's own
    (float32 for 0.5) or it does not outrank a tensor operand's category (bool < int < float)."""
    own = {bool: torch.bool, int: torch.int64, float: torch.get_default_dtype()}.get(type(const.value))
    return own == const.dtype or any(_category(const.dtype) <= _category(d) for d in tensor_dtypes)


def _dims(dims: Sequence[int], rank: int) -> list[int]:
    # Non-negative dims so that x.transpose(-2, -1) and x.transpose(0, 1) build the same node.
    return [d % rank if rank else 0 for d in dims]


class AtenBuilder:
    """Walks the traced fx graph once, mapping each aten call to a registry op (or extern) in a new OpGraph."""

    def __init__(self, gm: fx.GraphModule) -> None:
        self.gm = gm
        self.g = OpGraph()
        self.env: dict[fx.Node, Value] = {}
        self.mutations: list[tuple[str, str]] = []  # (graph input, its new value), in program order

    def build(self, names: list[str], examples: list[torch.Tensor]) -> OpGraph:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for node, name, t in zip(placeholders, names, examples, strict=True):
            self.env[node] = self.g.input(self._name(name), tuple(t.shape), t.dtype, tuple(t.stride()))
        for node in self.gm.graph.nodes:
            if node.op == "get_attr":
                self.env[node] = self._constant(node)
            elif node.op == "call_function":
                value = self._call(node)
                if value is not None:
                    self.env[node] = value
            elif node.op == "output":
                leaves = _leaves(node.args[0])
                if not leaves or not all(isinstance(leaf, fx.Node) for leaf in leaves):
                    raise GraphError("the captured function must return a tensor or a tuple/list of tensors")
                self.g.set_outputs([self._tensor(leaf) for leaf in leaves])
        return self.g

    def _mutate(self, target: str, value: str, node: fx.Node) -> None:
        """Record `target` (a graph input) overwritten with `value`; its shape and dtype must stay as they are."""
        t, v = self.g.node(target), self.g.node(value)
        if (t.shape, t.dtype) != (v.shape, v.dtype):
            raise GraphError(f"input {node.name} is written in place with a {list(v.shape)} {v.dtype} value over "
                             f"its {list(t.shape)} {t.dtype}")
        self.mutations = [(n, val) for n, val in self.mutations if n != target] + [(target, value)]

    # ---- values ---------------------------------------------------------------------------------
    def _name(self, base: str) -> str:
        name, i = base, 1
        while name in self.g:
            i += 1
            name = f"{base}_{i}"
        return name

    def _constant(self, node: fx.Node) -> _Const:
        value = getattr(self.gm, str(node.target))
        if not isinstance(value, torch.Tensor) or value.dim() != 0:
            shape = list(value.shape) if isinstance(value, torch.Tensor) else "?"
            raise GraphError(f"the captured function creates a constant tensor of shape {shape}; pass it as an input")
        return _Const(value.item(), value.dtype)

    def _tensor(self, node: fx.Node) -> str:
        """The graph node holding `node`'s value; a folded constant is materialised as a scalar_tensor extern."""
        value = self.env[node]
        if isinstance(value, _Const):
            attrs = {"target": "aten.scalar_tensor.default", "args": [value.value],
                     "kwargs": {"dtype": encode_arg(value.dtype)}}
            value = self.env[node] = self.g.add("extern", [], name=self._name(node.name), **attrs)
        if isinstance(value, _Multi):
            raise GraphError(f"{value.node.target} returns several tensors; use one of them")
        return value

    def _operands(self, *args: object) -> list[str | Scalar | None]:
        """Tensor operands as node names, numbers as numbers, None for anything else; a constant is folded
        into a number only where that keeps torch's result dtype (a 0-dim tensor may outrank a scalar)."""
        dtypes = [self._dtype(a) for a in args if isinstance(a, fx.Node) and not isinstance(self.env[a], _Const)]
        out: list[str | Scalar | None] = []
        for a in args:
            value = self.env[a] if isinstance(a, fx.Node) else None
            if isinstance(value, _Const) and _foldable(value, dtypes):
                out.append(value.value)
            elif isinstance(a, fx.Node):
                out.append(self._tensor(a))
            else:
                out.append(a if isinstance(a, bool | int | float) else None)
        return out

    def _dtype(self, node: fx.Node) -> torch.dtype:
        value = self.env[node]
        return value.dtype if isinstance(value, _Const) else self.g.node(self._tensor(node)).dtype

    # ---- calls ----------------------------------------------------------------------------------
    def _call(self, node: fx.Node) -> Value | None:
        target, (args, kw) = node.target, _args(node)
        if target is operator.getitem:
            src = self.env[args[0]]
            if isinstance(src, _Multi):
                index = int(args[1])  # named after the aten call: 'native_layer_norm', 'split_1'
                return self._extern(src.node, src.node.name if index == 0 else f"{src.node.name}_{index}", index)
            raise GraphError(f"cannot capture getitem on {args[0]}")
        if not isinstance(target, torch._ops.OpOverload):
            raise GraphError(f"cannot capture {target}: only aten ops are supported")
        if isinstance(node.meta.get("val"), tuple | list):
            return _Multi(node)
        op = target.overloadpacket.__name__
        _refuse_data_dependent(node, op, args)
        if op == "copy_" and args[0].op == "placeholder":  # an input written in place: its new value
            self._mutate(self._tensor(args[0]), self._tensor(args[1]), args[0])
            return None
        if op in _IDENTITY or (op in _CASTS and _cast_dtype(node) in (None, self._dtype(args[0]))):
            return self.env[args[0]]
        if op == "scalar_tensor":
            return _Const(args[0], kw.get("dtype") or torch.get_default_dtype())
        try:
            name = self._map(node, op, target._overloadname)
        except GraphError:
            name = None  # the registry refuses these operands (dtype, rank): PyTorch runs it instead
        return name if name is not None else self._extern(node, node.name)

    def _add(self, node: fx.Node, op: str, inputs: list[str], **attrs: Any) -> str:
        name = self.g.add(op, inputs, name=self._name(node.name), **attrs)
        val, got = node.meta.get("val"), self.g.node(name)
        if isinstance(val, torch.Tensor) and (got.shape, got.dtype) != (tuple(val.shape), val.dtype):
            # The registry's rule disagrees with aten (a 0-dim operand's dtype, say): let PyTorch run it.
            self.g.nx.remove_node(name)
            raise GraphError(f"{op} gives {list(got.shape)} {got.dtype}, aten gives {list(val.shape)} {val.dtype}")
        return name

    def _map(self, node: fx.Node, op: str, overload: str) -> str | None:
        """The registry node for one aten call, or None when it has no registry form."""
        args, kw = _args(node)
        if op in _UNARY and overload == "default":
            return self._add(node, op, [self._tensor(args[0])])
        if op in _BINARY or op == "rsub":
            return self._binary(node, op)
        if op in _BITWISE:
            return self._binary(node, _BITWISE[op])
        if op == "gelu":
            return self._add(node, op, [self._tensor(args[0])],
                             approximate=kw.get("approximate", args[1] if len(args) > 1 else "none"))
        if op in _CASTS:
            return self._add(node, "cast", [self._tensor(args[0])], dtype=dtype_name(_cast_dtype(node)))
        if op in ("clamp", "clamp_min", "clamp_max") and overload == "default":
            return self._clamp(node, op)
        if op == "where":
            return self._where(node)
        return self._map_structural(node, op, overload)

    def _map_structural(self, node: fx.Node, op: str, overload: str) -> str | None:
        args, kw = _args(node)
        ins = [self._tensor(a) if isinstance(a, fx.Node) else None for a in args]
        val = node.meta.get("val")
        shape = list(val.shape) if isinstance(val, torch.Tensor) else None
        rank = len(self.g.node(ins[0]).shape) if ins and ins[0] else 0
        if op in ("mm", "bmm"):
            return self._add(node, op, ins[:2])
        if op == "matmul" and rank == 2 and len(self.g.node(ins[1]).shape) == 2:
            return self._add(node, "mm", ins[:2])
        if op == "addmm":
            scale = {k: kw[k] for k in ("beta", "alpha") if kw.get(k, 1) != 1}
            return self._add(node, op, ins[:3], **scale)
        if op == "linear":
            return self._add(node, op, [i for i in ins if i is not None])
        if op == "t":
            return self._add(node, "transpose", ins[:1], dim0=0, dim1=1) if rank == 2 else ins[0]
        if op == "transpose" and overload == "int":
            d0, d1 = _dims(args[1:3], rank)
            return self._add(node, "transpose", ins[:1], dim0=d0, dim1=d1)
        if op == "permute":
            return self._add(node, "permute", ins[:1], dims=_dims(args[1], rank))
        if op in _VIEWS and shape is not None:
            return self._add(node, "view", ins[:1], shape=shape)
        if op == "expand" and shape is not None:
            return self._add(node, "expand", ins[:1], shape=shape)
        if op == "unsqueeze":
            return self._add(node, "unsqueeze", ins[:1], dim=_dims([args[1]], rank + 1)[0])
        if op == "slice" and overload == "Tensor" and rank:
            return self._slice(node, ins[0], rank)
        if op == "stack":
            return self._stack(node)
        if op == "index" and overload == "Tensor" and len(args[1]) == 1 and isinstance(args[1][0], fx.Node):
            return self._add(node, "index", [ins[0], self._tensor(args[1][0])])
        if op == "index_select" and _dims([args[1]], rank) == [0]:
            return self._add(node, "index_select", [ins[0], ins[2]])
        if op == "embedding":
            return self._add(node, "embedding", ins[:2])
        return None

    def _stack(self, node: fx.Node) -> str | None:
        """aten.stack of tensors of one shape and dtype (an int4 weight's nibbles, each by a constant shift)
        as the layout op; anything else stays PyTorch's."""
        args, kw = _args(node)
        parts = args[0] if args else kw.get("tensors")
        least, most = get_op("stack").arity
        if not isinstance(parts, list | tuple) or not least <= len(parts) <= most or \
                not all(isinstance(p, fx.Node) for p in parts):
            return None
        names = [self._tensor(p) for p in parts]
        infos = [self.g.node(n) for n in names]
        if any(i.shape != infos[0].shape or i.dtype != infos[0].dtype for i in infos):
            return None
        dim = args[1] if len(args) > 1 else kw.get("dim", 0)
        return self._add(node, "stack", names, dim=_dims([dim], len(infos[0].shape) + 1)[0])

    def _slice(self, node: fx.Node, src: str | None, rank: int) -> str | None:
        """aten.slice (x[a:b], x.narrow) as a layout index map, its bounds clipped as torch clips them."""
        args, kw = _args(node)
        dim, start, end, step = [*args[1:], None, None, None, None][:4]
        dim, start, end = kw.get("dim", dim if dim is not None else 0), kw.get("start", start), kw.get("end", end)
        step = kw.get("step", step if step is not None else 1)
        if src is None or not all(v is None or (isinstance(v, int) and not isinstance(v, bool))
                                  for v in (dim, start, end, step)):
            return None
        d = _dims([dim], rank)[0]
        size = self.g.node(src).shape[d]
        lo, hi = slice(start, end).indices(size)[:2]
        return self._add(node, "slice", [src], dim=d, start=lo, end=max(lo, hi), step=step)

    def _binary(self, node: fx.Node, op: str) -> str | None:
        """A binary op over two tensors, or one tensor and attrs 'scalar' (+ 'scalar_first' for 2 - x)."""
        args, kw = _args(node)
        if "rounding_mode" in kw or len(args) < 2:
            return None
        a, b = self._operands(args[0], args[1])
        alpha = kw.get("alpha", args[2] if len(args) > 2 else 1)
        if op == "rsub":  # rsub(x, y, alpha) = y - alpha * x
            op, a, b = "sub", b, self._scaled(node, a, alpha)
        elif op in ("add", "sub"):
            b = self._scaled(node, b, alpha)
        return self._pair(node, op, [], a, b)

    def _pair(self, node: fx.Node, op: str, lead: list[str], a: str | Scalar | None, b: str | Scalar | None
              ) -> str | None:
        """Operands a, b after `lead` tensors: both tensors, or one tensor and the other as attr 'scalar'."""
        if a is None or b is None or not (isinstance(a, str) or isinstance(b, str)):
            return None
        if isinstance(a, str) and isinstance(b, str):
            return self._add(node, op, [*lead, a, b])
        if isinstance(a, str):
            return self._add(node, op, [*lead, a], scalar=b)
        return self._add(node, op, [*lead, str(b)], scalar=a, scalar_first=True)

    def _scaled(self, node: fx.Node, value: str | Scalar | None, alpha: object) -> str | Scalar | None:
        """alpha * value for add/sub/rsub's alpha: folded into a scalar, or an explicit mul on a float tensor."""
        if alpha == 1 or value is None:
            return value
        if not isinstance(alpha, int | float) or isinstance(alpha, bool):
            return None
        if not isinstance(value, str):
            return value * alpha
        if not self.g.node(value).dtype.is_floating_point:
            return None
        return self.g.add("mul", [value], name=self._name(f"{node.name}_alpha"), scalar=alpha)

    def _clamp(self, node: fx.Node, op: str) -> str | None:
        args, kw = _args(node)
        keys = {"clamp": ("min", "max"), "clamp_min": ("min",), "clamp_max": ("max",)}[op]
        bounds = {k: kw.get(k, args[i + 1] if len(args) > i + 1 else None) for i, k in enumerate(keys)}
        bounds = {k: v for k, v in bounds.items() if v is not None}
        if not bounds or not all(isinstance(v, int | float) for v in bounds.values()):
            return None
        return self._add(node, "clamp", [self._tensor(args[0])], **bounds)

    def _where(self, node: fx.Node) -> str | None:
        args, _ = _args(node)
        if len(args) != 3 or not isinstance(args[0], fx.Node):
            return None
        a, b = self._operands(args[1], args[2])
        return self._pair(node, "where", [self._tensor(args[0])], a, b)

    def _extern(self, node: fx.Node, name: str, output_index: int | None = None) -> str:
        """An extern node running `node`'s aten op; tensor arguments become {'input': slot}."""
        inputs: list[str] = []
        args, kw = _args(node)

        def encode(arg: object) -> object:
            if isinstance(arg, fx.Node):
                src = self._tensor(arg)
                if src not in inputs:
                    inputs.append(src)
                return {"input": inputs.index(src)}
            if isinstance(arg, list | tuple):
                return [encode(a) for a in arg]
            return encode_arg(arg)

        attrs: dict[str, Any] = {"target": str(node.target), "args": [encode(a) for a in args],
                                 "kwargs": {k: encode(v) for k, v in kw.items()}}
        if output_index is not None:
            attrs["output_index"] = output_index
        return self.g.add("extern", inputs, name=self._name(name), **attrs)
