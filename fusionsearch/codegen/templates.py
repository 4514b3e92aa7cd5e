"""Moved: the matmul template's source is in fusionsearch/kinds/matmul_template/, its problem sizes in
fusionsearch/plan/matmul.py. These names stay here for the benchmark scripts that import them."""

from fusionsearch.plan.matmul import Problem, problem

__all__ = ["Problem", "problem"]
