"""Cost models: the hardware profile and the analytic bytes/flops/roofline estimate of a plan."""

from fusionsearch.costmodel.analytic import Estimate, KernelEstimate, estimate, fits, prologue_reads_ok
from fusionsearch.costmodel.hardware import H200, Hardware

__all__ = ["H200", "Estimate", "Hardware", "KernelEstimate", "estimate", "fits", "prologue_reads_ok"]
