"""The matmul regions as one PyTorch operator, `torch.ops.fusionsearch.region(key, inputs)`, so that Inductor
compiles a whole captured graph at once: its glue fused as Inductor fuses it, each tuned region a call of its
generated module between Inductor's kernels (as Inductor calls any extern kernel). The key names a registered
region: its module's run and its outputs' shapes and dtypes (what the operator's fake form returns)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fusionsearch.graph.opgraph import OpGraph

__all__ = ["register_region"]


@dataclass(frozen=True)
class _Registered:
    run: Callable[..., list[torch.Tensor]]
    outputs: tuple[tuple[tuple[int, ...], torch.dtype], ...]


_REGIONS: dict[str, _Registered] = {}


def register_region(run: Callable[..., list[torch.Tensor]], graph: OpGraph) -> str:
    """Register a region's run with its graph (whose outputs' shapes and dtypes the fake form returns);
    returns its key."""
    key = f"region{len(_REGIONS)}"
    _REGIONS[key] = _Registered(run, tuple((tuple(graph.node(o).shape), graph.node(o).dtype) for o in graph.outputs))
    return key


@torch.library.custom_op("fusionsearch::region", mutates_args=())
def region(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run the registered region on its inputs; its outputs are new tensors."""
    return list(_REGIONS[key].run(*inputs))


@region.register_fake
def _region_fake(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [inputs[0].new_empty(shape, dtype=dtype) for shape, dtype in _REGIONS[key].outputs]
