"""Tensors that cannot exist: a size is refused when it is checked, not when an allocation fails minutes later.

A spec holds only numbers, so one with a size or a stride off by a few digits (an input spanning 541 GB) was
accepted, then a search died in torch's allocator. The bound is the memory of the machine the graph is checked
on: its physical memory, or a larger GPU's. The GPU is asked only for a tensor past the host's memory, so that
checking an ordinary graph never starts CUDA (seconds, and memory, in every process that loads a spec)."""

from __future__ import annotations

import functools
import os

from fusionsearch.errors import GraphError


@functools.cache
def host_bytes() -> int:
    """The host's physical memory in bytes; 0 where the platform does not say (then no host bound is known)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 0


@functools.cache
def gpu_bytes() -> int:
    """The largest visible GPU's memory in bytes; 0 without one."""
    import torch

    if not torch.cuda.is_available():
        return 0
    return max(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))


def machine_bytes() -> int:
    """The most bytes one tensor can hold on this machine (0: unknown)."""
    return max(host_bytes(), gpu_bytes())


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n:,} bytes"


def check_fits(nbytes: int, what: str) -> None:
    """A GraphError naming `what` when a tensor of `nbytes` is more than this machine's memory could hold."""
    if host_bytes() and nbytes <= host_bytes():
        return
    limit = machine_bytes()
    if limit and nbytes > limit:
        raise GraphError(f"{what} needs {_gb(nbytes)}, more than this machine's memory ({_gb(limit)}) could hold; "
                         "check its sizes and strides")
