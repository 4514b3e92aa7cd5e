"""What the plan layer knows of a matmul node: its operands by role and its problem sizes, read by legality,
the default tile config and the reference plans (the matmul kinds in kinds/ expose the same facts)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusionsearch.graph.opgraph import OpGraph


@dataclass(frozen=True)
class Problem:
    """The matmul's sizes: B batches of [M,K] @ [K,N]."""

    batch: int
    m: int
    n: int
    k: int


def template_operands(g: OpGraph, mm: str) -> dict[str, str]:
    """The matmul's operand nodes by role: A, B, and bias where the op has one."""
    node = g.node(mm)
    if node.op == "addmm":
        return {"bias": node.inputs[0], "A": node.inputs[1], "B": node.inputs[2]}
    roles = {"A": node.inputs[0], "B": node.inputs[1]}
    if node.op == "linear" and len(node.inputs) == 3:
        roles["bias"] = node.inputs[2]
    return roles


def problem(g: OpGraph, mm: str) -> Problem:
    """The sizes of matmul node `mm` (bmm: batched; linear: the input's leading dims flattened into M)."""
    node = g.node(mm)
    ops = template_operands(g, mm)
    a, b = g.node(ops["A"]), g.node(ops["B"])
    if node.op == "bmm":
        return Problem(a.shape[0], a.shape[1], b.shape[2], a.shape[2])
    if node.op == "linear":
        return Problem(1, math.prod(a.shape[:-1]), b.shape[0], a.shape[-1])
    return Problem(1, a.shape[0], b.shape[1], a.shape[1])


def shared_a_matmuls(g: OpGraph, epilogue: tuple[str, ...]) -> tuple[str, ...]:
    """The matmuls among a fused matmul's epilogue nodes: each reads the kernel's A operand tile with its own B
    and runs in the same K loop (swiglu's gate and up: the two weights read by one kernel, SiLU·up computed on
    both accumulators), its value on the output tile for the rest of the epilogue."""
    return tuple(n for n in epilogue if g.node(n).kind == "template")
