"""Cost models: the hardware profile and the analytic bytes/flops/roofline estimate of a plan."""

from fusionsearch.costmodel.analytic import Estimate, KernelEstimate, estimate, fits, prologue_reads_ok
from fusionsearch.costmodel.hardware import H200, Hardware


def load_default():  # type: ignore[no-untyped-def]
    """The shipped learned model when its hardware signature matches this device, else None."""
    from fusionsearch.costmodel.learned import load_default as _load_default

    return _load_default()


def evaluate(model, data_path):  # type: ignore[no-untyped-def]
    """Ranking figures of `model` on a measurements dataset (see costmodel.train.evaluate)."""
    from fusionsearch.costmodel.train import evaluate as _evaluate

    return _evaluate(model, data_path)


__all__ = ["H200", "Estimate", "Hardware", "KernelEstimate", "estimate", "evaluate", "fits", "load_default",
           "prologue_reads_ok"]
