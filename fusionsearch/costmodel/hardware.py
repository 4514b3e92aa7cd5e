"""The hardware profile (fusionsearch.hardware, re-exported here) and where the shipped learned model lives."""

from __future__ import annotations

import os

from fusionsearch.hardware import H200, Hardware

__all__ = ["DEFAULT_MODEL_PATH", "H200", "Hardware"]

# The learned model shipped for the device it was trained on; the search only loads it (and scikit-learn)
# when the file exists.
DEFAULT_MODEL_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  "datasets", "data", "costmodel.npz")
