"""The matmul template kind (kind.py), its Triton source (source.py) and its tile config candidates (configs.py)."""

from fusionsearch.kinds.matmul_template.kind import TEMPLATE, TemplateKind

__all__ = ["TEMPLATE", "TemplateKind"]
