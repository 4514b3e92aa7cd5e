"""Built-in workloads, the random graph generator, shipped measurements and models."""

from fusionsearch.datasets.workloads import REFERENCE_CASES, WORKLOADS, list_workloads, workload

__all__ = ["REFERENCE_CASES", "WORKLOADS", "list_workloads", "workload"]
