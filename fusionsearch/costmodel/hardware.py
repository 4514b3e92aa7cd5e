"""The hardware profile (fusionsearch.hardware, re-exported here); the shipped learned model's path is a
setting (fusionsearch.settings: FUSIONSEARCH_MODEL)."""

from __future__ import annotations

from fusionsearch.hardware import H200, Hardware

__all__ = ["H200", "Hardware"]
