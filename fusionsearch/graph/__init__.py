"""The op graph: OpGraph, the op registry, JSON specs, capture from PyTorch, the reference executor."""

# The op families register themselves in graph/registry.py on import; importing them here, with the package,
# fills the registry before any module of the package is used (the registry never imports them back).
from fusionsearch.graph import ops_bitwise, ops_extern, ops_pointwise, ops_structural  # noqa: F401  (isort: skip)

from fusionsearch.graph.opgraph import Node, OpGraph, contiguous_strides
from fusionsearch.graph.reference import random_inputs, reference
from fusionsearch.graph.registry import REGISTRY, OpDef, dtype_from_name, dtype_name, get_op, ops_of_kind
from fusionsearch.graph.spec import graph_from_dict, load_graph

__all__ = ["Node", "OpGraph", "OpDef", "REGISTRY", "contiguous_strides", "dtype_from_name", "dtype_name", "get_op",
           "graph_from_dict", "load_graph", "ops_of_kind", "random_inputs", "reference"]
