"""Measurement: validation against the reference and GPU timing."""

from fusionsearch.measure.bench import Timing, benchmark, time_callable
from fusionsearch.measure.validate import TOLERANCE, Validation, rel_error, validate

__all__ = ["TOLERANCE", "Timing", "Validation", "benchmark", "rel_error", "time_callable", "validate"]
