"""What a compiled kernel uses on its GPU: a plain value, produced by codegen (compiling the kernel) and read by
the cost model (its features), so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelResources:
    """Per thread: registers and the stack frame (bytes; ptxas's spills and local arrays); per program:
    shared memory (bytes). From the machine code (SASS; None where a record predates them): its instructions,
    those inside loops (a template's K loop: the work of each K step), the loops (backward branches), and the
    local-memory loads and stores (spill traffic) inside and outside loops: a spill in the K loop costs every K
    step, one in the epilogue once a tile (a 255-register GELU epilogue on a 128x256 tile spills there and is
    the fastest plan of mm_bias_gelu M4096 on the H200)."""

    registers: int
    stack_bytes: int
    shared_bytes: int
    instructions: int | None = None
    loop_instructions: int | None = None
    loops: int | None = None
    loop_local_ops: int | None = None
    other_local_ops: int | None = None
