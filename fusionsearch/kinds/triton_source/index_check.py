"""Gathers check their indices: a row index outside its table is reported, never read (issue 53 item 10)."""

from __future__ import annotations

from typing import Any

from fusionsearch.kinds.triton_source.emit import Source

INDEX_FLAG = "err_ptr"
INDEX_ERROR = "fusionsearch: an index is out of range of the table it gathers from"


def check_index(body: Source, index: str, size: int, lanes: str | None, buffers: Any) -> None:
    """Lines checking indices `index` (negative ones already counted from the end) against a table of `size`
    rows, in the lanes `lanes` keeps: one out of range sets the kernel's int32 flag (the INDEX_FLAG parameter,
    which `buffers`, the kernel's tile.Buffers, then lists) and fails a device assert. The caller keeps every
    read inside the table itself (a gather clamps its row).

    The cheapest sound check, as Inductor's for indirect indexing: no host sync (none is allowed in a CUDA
    graph's capture) and a few instructions a gathered row, none in a K loop. The assert sits in a branch taken
    only on a bad index: inline, its call kept 40 more registers live in gather_mm's template. On a GPU it stops
    the kernel, as eager PyTorch's index kernels do (compiled in: the module launches these kernels with
    debug=True, sanitize_overflow=False); Triton's CPU interpreter runs no assert, so there the module reads the
    flag after the call (free on a CPU)."""
    buffers.flagged = True
    bad = body.names.fresh("out_of_table")
    keep = f" & ({lanes})" if lanes else ""
    body.line(f"{bad} = (({index} < 0) | ({index} >= {size})){keep}")
    body.line(f"if tl.max({bad}.to(tl.int32) + tl.zeros([1], tl.int32)) > 0:  # a scalar index made a block")
    body.line(f"    tl.store({INDEX_FLAG} + {index} * 0, 1, mask={bad})")
    body.line(f"    tl.device_assert(~{bad}, {INDEX_ERROR!r})")
