"""GeneratedKernel: one @triton.jit function's source with what its launch needs."""

from __future__ import annotations

from dataclasses import dataclass, field

from fusionsearch.kinds.triton_source.tile import BufferArg


@dataclass
class GeneratedKernel:
    """Source of one Triton kernel, its tensor arguments in order, its grid and its launch constants.

    `workspace` is the fp32 element count of a scratch buffer (split-K partial sums) passed as the last
    tensor argument, shared by the kernels of one template step; `semaphores` the count of int32 counters
    after it (serial split-K), kept by the module across calls, each reset to zero by the kernel that uses it."""

    name: str
    source: str
    args: list[BufferArg]
    grid: tuple[int | str, int, int]  # a str: an expression of the generated module (a persistent grid)
    constexprs: dict[str, int] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 3
    workspace: int = 0
    semaphores: int = 0  # int32 arrival counters (serial split-K), zero between launches, passed after workspace
    routing: int = 0  # int32 table the step's first kernel writes and the later ones read (the grouped matmul's
    # pairs sorted by expert), passed after the semaphores
    index_flag: bool = False  # it gathers rows by an index: the int32 flag (tile.check_index) follows its tensors
    # parameter, and it is compiled with debug=True (its device asserts) and sanitize_overflow=False
