"""Helpers the kinds share to emit Triton source: indented lines and fresh names (emit), element types (dtypes),
tile index expressions and the evaluator of fused nodes on a tile (tile), the generated kernel value (kernel)."""
