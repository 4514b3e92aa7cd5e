"""The decode matmul kind: matmuls of at most 16 rows, every weight byte read once (kind.py)."""

from fusionsearch.kinds.decode_matmul.kernel import DECODE_MAX_M, PRODUCTS, DecodeConfig, DecodeKernel
from fusionsearch.kinds.decode_matmul.kind import DECODE, DecodeKind

__all__ = ["DECODE", "DECODE_MAX_M", "PRODUCTS", "DecodeConfig", "DecodeKernel", "DecodeKind"]
