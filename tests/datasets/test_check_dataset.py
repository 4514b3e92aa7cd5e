"""A dataset to read is checked before anything is computed from it (the CLI's costmodel compile, train and
evaluate): missing, a directory, or not a dataset, each said in one sentence with the reason
(datasets.measurements.check_dataset, which the CLI once made by reading another error's text)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from fusionsearch.datasets.measurements import append_rows, check_dataset
from fusionsearch.errors import SpecError


def test_a_dataset_passes_and_what_is_not_one_is_named_with_its_reason(tmp_path: Path) -> None:
    good = tmp_path / "data.gz"
    append_rows(str(good), [{"graph_id": "g0"}])
    check_dataset(str(good))
    (tmp_path / "adir").mkdir()
    (tmp_path / "text.bin").write_bytes(b"plain text, not gzip")
    with gzip.open(tmp_path / "notrows.gz", "wt") as f:
        f.write("not json\n")
    cases = {"missing.gz": "missing.gz: no such dataset file",
             "adir": "adir: not a dataset file (a directory)",
             "text.bin": "text.bin is not a measurements dataset (it does not begin with a gzip member): give a "
                         "file `fusionsearch costmodel collect` wrote",
             "notrows.gz": "notrows.gz is not a measurements dataset (its first intact gzip member does not hold "
                           "JSON rows)"}
    for name, words in cases.items():
        with pytest.raises(SpecError) as e:
            check_dataset(str(tmp_path / name))
        assert words in str(e.value) and str(e.value).count("\n") == 0, str(e.value)
