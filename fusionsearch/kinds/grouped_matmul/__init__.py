"""The grouped matmul kind: a mixture-of-experts layer's expert matmuls in one launch, each touched expert's
weight read once for all its tokens (kind.py)."""

from fusionsearch.kinds.grouped_matmul.kernel import GroupedConfig, GroupedKernel
from fusionsearch.kinds.grouped_matmul.kind import GROUPED, GroupedKind
from fusionsearch.kinds.grouped_matmul.routing import ExpertRouting, expert_routing

__all__ = ["GROUPED", "ExpertRouting", "GroupedConfig", "GroupedKernel", "GroupedKind", "expert_routing"]
