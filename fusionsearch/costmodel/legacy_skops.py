"""The skops archives cost models were saved as before the .npz files (costmodel/trees.py): read only when they
hold nothing but the types a model holds, and written only where a path asks for one (ending in .skops)."""

from __future__ import annotations

import zipfile
from typing import Any

from fusionsearch.errors import CostModelError

__all__ = ["read", "write"]


def read(path: str, trusted: list[str]) -> dict[str, Any]:
    """The record of a legacy skops model file, loaded only when it holds nothing but `trusted` types (beyond
    skops's own: builtins, numpy arrays, scikit-learn's loss objects)."""
    import skops.io

    try:
        untrusted = skops.io.get_untrusted_types(file=path)
    except Exception:  # skops raises zipfile, JSON and key errors alike on files it did not write
        raise CostModelError(f"{path}: not a cost model file (not a skops archive)") from None
    unexpected = sorted(set(untrusted) - set(trusted))
    if unexpected:
        raise CostModelError(f"{path}: refused, it holds types a cost model never holds ({', '.join(unexpected)})")
    try:
        record = skops.io.load(path, trusted=trusted)
    except Exception as e:
        raise CostModelError(f"{path}: not a readable cost model file ({type(e).__name__})") from None
    return record if isinstance(record, dict) else {}


def write(record: dict[str, Any], path: str) -> None:
    """`record` (JSON values and lists of scikit-learn regressors) as a compressed skops archive at `path`."""
    import skops.io

    skops.io.dump(record, path, compression=zipfile.ZIP_DEFLATED, compresslevel=9)
