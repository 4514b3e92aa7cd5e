"""Capture: trace a PyTorch function or nn.Module to aten ops with make_fx and map them onto registry ops.

make_fx (not torch.export) because it traces plain functions and modules alike on every torch we support,
and functionalize() turns in-place ops into the pure ones the registry knows. Any aten op without a registry
counterpart becomes an extern node, so capture never refuses a traceable program. This module traces and binds
the call; graph/aten_map.py maps the traced aten calls onto the registry."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from fusionsearch import settings
from fusionsearch.errors import FusionSearchError, GraphError
from fusionsearch.graph.aten_map import AtenBuilder
from fusionsearch.graph.grouped_mm import gather_before_transpose, grouped_mm_decompositions
from fusionsearch.graph.matmul_folding import fold_broadcast_bmm, rows_first_bmm
from fusionsearch.graph.opgraph import OpGraph


@dataclass(frozen=True)
class CapturedProgram:
    """A traced program: its OpGraph, whose outputs are the `returned` values the function returns followed by
    one new value per input it writes in place (`mutated[i]` names the graph input that output
    `returned + i` overwrites: a KV cache written at `input_pos`, say). Whoever runs the graph must write
    those values back, as eager PyTorch would have."""

    graph: OpGraph
    returned: int
    mutated: tuple[str, ...]
    signature: CallSignature | None = None


@dataclass(frozen=True)
class CallSignature:
    """How a call of the captured function maps onto the graph's inputs, and the graph's outputs back onto what
    the function returns: tensor arguments (by parameter name) become inputs, then the module's state (the live
    parameters and buffers); arguments traced as constants must be given the same again."""

    target: Any  # the function (a module's forward) whose parameters name the slots
    slots: tuple[str, ...]  # argument names as traced: positional ones, then keywords
    constants: tuple[Any, ...]  # per slot, the traced value of a non-tensor argument (TENSOR for a tensor)
    state: tuple[torch.Tensor, ...]
    out_spec: Any  # the pytree structure of what the function returns

    def inputs(self, args: Sequence[Any], kwargs: dict[str, Any]) -> list[torch.Tensor]:
        """The graph's inputs for a call with `args`, `kwargs`; GraphError naming an argument that does not fit."""
        given = self._bind(args, kwargs)
        tensors = []
        for name, traced in zip(self.slots, self.constants, strict=True):
            if name not in given:
                raise GraphError(f"argument {name!r} is missing (it was given when the function was tuned)")
            value = given.pop(name)
            if traced is TENSOR:
                if not isinstance(value, torch.Tensor):
                    raise GraphError(f"argument {name!r} must be a tensor, got {type(value).__name__}")
                tensors.append(value)
            elif isinstance(value, torch.Tensor) or value != traced:
                raise GraphError(f"argument {name!r} was {traced!r} when tuned, got {_short(value)}: the plan "
                                 "computes with the tuned value; tune again for another")
        if given:
            name = next(iter(given))
            raise GraphError(f"argument {name!r} was not given when the function was tuned; tune with it")
        return [*tensors, *self.state]

    def outputs(self, values: Sequence[torch.Tensor]) -> Any:
        """The graph's returned outputs in the structure the function returns."""
        from torch.utils._pytree import tree_unflatten

        return tree_unflatten(list(values), self.out_spec)

    def _bind(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            bound = inspect.signature(self.target).bind(*args, **kwargs)
        except TypeError as e:
            raise GraphError(f"the tuned function cannot take these arguments: {e}") from None
        except ValueError:  # no signature: positional slots in order
            return dict(zip(self.slots, args, strict=False)) | kwargs
        named: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = bound.signature.parameters[name].kind
            if kind == inspect.Parameter.VAR_POSITIONAL:
                named.update({f"{name}{i}": v for i, v in enumerate(value)})
            elif kind == inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        return named


TENSOR = object()  # the CallSignature.constants entry of a tensor argument


def _short(value: object) -> str:
    return f"a tensor {list(value.shape)}" if isinstance(value, torch.Tensor) else repr(value)[:60]


def capture(fn_or_module: Callable[..., Any], *example_inputs: Any, **example_kwargs: Any) -> OpGraph:
    """Trace `fn_or_module(*example_inputs, **example_kwargs)` into an OpGraph; unsupported aten ops become
    extern nodes.

    Graph inputs are the tensor arguments (named after the function's parameters; keyword tensors by their
    keyword), then an nn.Module's parameters and buffers (dots replaced by '_'); Python numbers, None and
    parameters left to their defaults are constants of the trace; outputs are the returned tensors in order.
    A function that writes one of its inputs in place is refused (use capture_program, which returns the new
    values as outputs)."""
    program = capture_program(fn_or_module, *example_inputs, **example_kwargs)
    if program.mutated:
        raise GraphError(f"the captured function writes its input {program.mutated[0]!r} in place (copy_, "
                         "index_put_, slice assignment); return the new value instead")
    return program.graph


def capture_program(fn_or_module: Callable[..., Any], *example_inputs: Any, **example_kwargs: Any
                    ) -> CapturedProgram:
    """capture(), keeping what the function writes into its inputs: each in-place write of an input becomes
    one more output of the graph (see CapturedProgram)."""
    if not callable(fn_or_module):
        raise GraphError(f"capture needs a function or nn.Module, got {type(fn_or_module).__name__}")
    settings.interpret_without_gpu()  # the trace imports Triton: its interpreter is chosen first (no GPU: on)
    fn, names, flat, slots = _flatten(fn_or_module, list(example_inputs), example_kwargs)
    gm = _trace(fn, flat)
    builder = AtenBuilder(gm)
    g = builder.build(names, flat)
    returned = len(g.outputs)
    if builder.mutations:
        g.set_outputs([*g.outputs, *(value for _, value in builder.mutations)])
    target = fn_or_module.forward if isinstance(fn_or_module, torch.nn.Module) else fn_or_module
    constants = tuple(TENSOR if isinstance(v, torch.Tensor) else v for _, v in slots)
    state = tuple(flat[sum(c is TENSOR for c in constants):])  # the module's parameters and buffers
    signature = CallSignature(target, tuple(n for n, _ in slots), constants, state, getattr(fn, "out_spec", None))
    return CapturedProgram(g, returned, tuple(name for name, _ in builder.mutations), signature)


def _flatten(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
             ) -> tuple[Callable[..., Any], list[str], list[torch.Tensor], list[tuple[str, Any]]]:
    """A function of tensors only, its input names and example values: tensor arguments (positional or
    keyword) become inputs, other arguments constants of the trace, module state trailing inputs; and the
    arguments as given, (name, value) each."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    slots = _argument_slots(target, args, kwargs)
    tensors = [(name, value) for name, value in slots if isinstance(value, torch.Tensor)]
    names, inputs = [n for n, _ in tensors], [v for _, v in tensors]
    n = len(inputs)
    state = _named_state(fn) if isinstance(fn, torch.nn.Module) else []
    keys = [k for k, _ in state]
    positional = len(args)

    def call(*flat: torch.Tensor) -> Any:
        from torch.utils._pytree import tree_flatten

        it = iter(flat[:n])
        values = [next(it) if isinstance(v, torch.Tensor) else v for _, v in slots]
        call_args, call_kwargs = values[:positional], dict(zip(kwargs, values[positional:], strict=True))
        if isinstance(fn, torch.nn.Module):
            out = torch.func.functional_call(fn, dict(zip(keys, flat[n:], strict=True)), tuple(call_args),
                                             call_kwargs)
        else:
            out = fn(*call_args, **call_kwargs)
        call.out_spec = tree_flatten(out)[1]  # type: ignore[attr-defined]  # the structure the caller gets back
        return out

    call.__name__ = type(fn).__name__ if isinstance(fn, torch.nn.Module) else getattr(fn, "__name__", "the function")
    return call, names + [k.replace(".", "_") for k in keys], inputs + [v for _, v in state], slots


def _argument_slots(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, value) of each argument given, positional then keyword; refuses values a trace cannot hold."""
    names = _param_names(fn, len(args))
    slots = list(zip(names, args, strict=True)) + list(kwargs.items())
    for i, (name, value) in enumerate(slots):
        if not isinstance(value, torch.Tensor | bool | int | float | None):
            where = f"example input {i}" if i < len(args) else f"keyword argument {name!r}"
            raise GraphError(f"capture's {where} must be a tensor or a Python number (a constant of the trace), "
                             f"got {type(value).__name__}")
    return slots


def _named_state(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*module.named_parameters(), *module.named_buffers()]


def module_state(module: torch.nn.Module) -> list[torch.Tensor]:
    """A module's parameters and buffers in the order capture appends them as graph inputs (after the
    example inputs): what a caller passes after its own inputs to run the captured graph."""
    return [v for _, v in _named_state(module)]


def _param_names(fn: Callable[..., Any], count: int) -> list[str]:
    """Positional parameter names of `fn` (x, w, s), numbered for *args, 'argN' where no signature exists."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names: list[str] = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            names += [f"{p.name}{i}" for i in range(count - len(names))]
    return (names + [f"arg{i}" for i in range(len(names), count)])[:count]


def _trace(fn: Callable[..., Any], inputs: Sequence[torch.Tensor]) -> fx.GraphModule:
    """Trace on fake tensors (no compute, any size); an exception inside the user's code becomes a GraphError."""
    # Fake-tensor dispatch logs a traceback before re-raising a shape error; the GraphError says it in one line.
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    try:
        gm = make_fx(torch.func.functionalize(fn), decomposition_table=grouped_mm_decompositions(),  # offsets
                     tracing_mode="fake")(*[t.detach() for t in inputs])  # as rows by group (graph/grouped_mm.py)
    except FusionSearchError:
        raise
    except GuardOnDataDependentSymNode:
        raise GraphError(f"tracing {getattr(fn, '__name__', 'the function')} failed: it decides in Python on a "
                         "tensor's values (`if t > 0`, float(t), int(t), `.item()` used as a number or size), "
                         "which cannot be captured; keep it a tensor (torch.where instead of if)") from None
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise GraphError(f"tracing {getattr(fn, '__name__', 'the function')} failed: {first}") from None
    finally:
        fake_log.setLevel(level)
    fold_broadcast_bmm(gm)  # one weight broadcast over a batch of rows: one mm (graph/matmul_folding.py)
    rows_first_bmm(gm)  # matrices times one column: one row times the transposed matrices
    gather_before_transpose(gm)  # a grouped matmul's expert weights gathered as stored, then transposed
    gm.graph.eliminate_dead_code()
    return gm
