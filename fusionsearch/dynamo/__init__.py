"""torch.compile integration: `torch.compile(model, backend="fusionsearch")` and `fusionsearch.backend(...)`."""

from fusionsearch.dynamo.backend import BackendOptions, backend, fusionsearch_backend
from fusionsearch.dynamo.plan_cache import PlanCache

__all__ = ["BackendOptions", "PlanCache", "backend", "fusionsearch_backend"]
