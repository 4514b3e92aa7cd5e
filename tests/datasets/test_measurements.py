"""Measurements datasets lose nothing to damage: a bad batch is skipped and reported, every intact batch around it
is read, appending only adds bytes, and a file that is not a dataset is refused and left as it was."""

from __future__ import annotations

import gzip
import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

from fusionsearch.datasets.measurements import DatasetWarning, append_rows, read_dataset, read_rows
from fusionsearch.errors import CostModelError


def batch(k: int, n: int = 20) -> list[dict[str, Any]]:
    return [{"graph_id": f"g{k}", "plan_id": f"p{i}", "kernel_index": i, "time_us": 1.5 * i + k} for i in range(n)]


def write_batches(path: str, count: int) -> list[tuple[int, int]]:
    """`count` batches appended one at a time; the (start, end) byte range of each."""
    ranges = []
    for k in range(count):
        start = os.path.getsize(path) if os.path.exists(path) else 0
        append_rows(path, batch(k))
        ranges.append((start, os.path.getsize(path)))
    return ranges


def flip(path: str, offset: int) -> None:
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= 0x5A
    Path(path).write_bytes(bytes(data))


def read_warning(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = read_rows(path)
    return rows, [str(w.message) for w in caught if issubclass(w.category, DatasetWarning)]


def without(k: int, count: int) -> list[dict[str, Any]]:
    return [r for j in range(count) if j != k for r in batch(j)]


@pytest.mark.parametrize("where", ["header", "middle", "trailer"])
def test_a_flipped_byte_costs_only_its_own_batch_and_the_next_append_only_adds(tmp_path: Path, where: str) -> None:
    path = str(tmp_path / "m.jsonl.gz")
    ranges = write_batches(path, 12)
    k = 5
    start, end = ranges[k]
    flip(path, {"header": start + 3, "middle": (start + end) // 2, "trailer": end - 6}[where])
    rows, messages = read_warning(path)
    assert rows == without(k, 12)
    assert messages == [f"{path}: a damaged or torn batch (gzip member) at byte {start} ({end - start} bytes) could "
                        "not be read; its 20 rows are skipped, every intact batch around it is read"]
    before = Path(path).read_bytes()
    append_rows(path, batch(99, 3))
    after = Path(path).read_bytes()
    assert len(after) > len(before) and after[:len(before)] == before  # nothing cut or rewritten
    rows, messages = read_warning(path)
    assert rows == without(k, 12) + batch(99, 3) and len(messages) == 1


def test_a_damaged_batch_written_before_batches_counted_their_rows_is_estimated(tmp_path: Path) -> None:
    """Older files: members as gzip.compress writes them, with no row count in the header."""
    path = tmp_path / "old.jsonl.gz"
    members = [gzip.compress("".join(json.dumps(r) + "\n" for r in batch(k)).encode(), mtime=0) for k in range(6)]
    path.write_bytes(b"".join(members))
    start = sum(map(len, members[:2]))
    flip(str(path), start + len(members[2]) // 2)
    rows, messages = read_warning(str(path))
    assert rows == without(2, 6)
    assert len(messages) == 1 and f"at byte {start} ({len(members[2])} bytes)" in messages[0]
    assert "an estimated 20 rows (from its size) are skipped" in messages[0]  # said to be an estimate


def test_lines_that_are_not_json_rows_are_skipped_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl.gz"
    good = [json.dumps(r) for r in batch(0, 3)]
    path.write_bytes(gzip.compress("\n".join([good[0], "{not json", good[1], "[1, 2]", good[2], ""]).encode()))
    rows, messages = read_warning(str(path))
    assert rows == batch(0, 3)
    assert len(messages) == 1 and "2 lines that are not JSON rows (lines 2, 4)" in messages[0]
    assert "at byte 0" in messages[0]


def test_a_torn_last_batch_is_kept_and_the_next_batch_written_after_it(tmp_path: Path) -> None:
    path = str(tmp_path / "m.jsonl.gz")
    write_batches(path, 3)
    whole = Path(path).read_bytes()
    torn_at = len(whole)
    append_rows(path, batch(3))
    Path(path).write_bytes(Path(path).read_bytes()[:torn_at + 40])  # a kill in the middle of the write
    rows, messages = read_warning(path)
    assert rows == without(3, 4)
    # at the end of the file nothing after it says what else was written: a lower bound
    assert messages == [f"{path}: a damaged or torn batch (gzip member) at byte {torn_at} (40 bytes) could not be "
                        "read; at least 20 rows are skipped, every intact batch around it is read"]
    append_rows(path, batch(4))
    assert Path(path).read_bytes()[:torn_at + 40] == whole + Path(path).read_bytes()[torn_at:torn_at + 40]
    assert os.path.getsize(path) > torn_at + 40
    rows, messages = read_warning(path)
    assert rows == without(3, 5) and len(messages) == 1 and "its 20 rows are skipped" in messages[0]  # exact now


def test_a_first_batch_torn_by_a_kill_still_takes_appends(tmp_path: Path) -> None:
    path = str(tmp_path / "m.jsonl.gz")
    append_rows(path, batch(0))
    Path(path).write_bytes(Path(path).read_bytes()[:30])
    append_rows(path, batch(1))
    assert read_warning(path)[0] == batch(1)


@pytest.mark.parametrize("content", [
    b"not a dataset, just some text\n",                   # no gzip member at all
    gzip.compress(b"plain text, not JSON rows\n"),          # a gzip file of something else
], ids=["text", "foreign-gzip"])
def test_appending_to_a_file_that_is_not_a_dataset_is_refused_and_leaves_it_unchanged(tmp_path: Path,
                                                                                        content: bytes) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(CostModelError, match="is not a measurements dataset"):
        append_rows(str(path), batch(0))
    assert path.read_bytes() == content


def test_reading_a_file_that_is_not_a_dataset_reports_it_and_reads_nothing(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not a dataset, just some text\n")
    got = read_dataset(str(path))
    assert got.rows == [] and len(got.damage) == 1 and got.damage[0].what == "bytes that are not a gzip member"
    assert read_dataset(str(tmp_path / "missing.jsonl.gz")).rows == []


def test_batches_are_ordinary_gzip_members() -> None:
    """Other tools (zcat, gzip.open) read the file whole: the row count rides in a standard FEXTRA field."""
    from fusionsearch.datasets.measurements import _member

    data = _member(batch(0, 4))
    assert gzip.decompress(data).decode().splitlines() == [json.dumps(r, sort_keys=True) for r in batch(0, 4)]


def test_damage_over_several_batches_headers_counts_exactly_what_was_lost(tmp_path: Path) -> None:
    """Issue 53 item 18: bytes overwritten across several batches (their headers with them) were reported as the
    rows of the headers left ("23 rows" where 34 were lost) and called exact. The totals in the intact batches'
    headers around the damage count it exactly, whatever it destroyed."""
    path = str(tmp_path / "m.jsonl.gz")
    ranges = []
    for k, n in enumerate([5, 9, 13, 7, 11, 4, 6]):
        start = os.path.getsize(path) if os.path.exists(path) else 0
        append_rows(path, batch(k, n))
        ranges.append((start, os.path.getsize(path)))
    data = bytearray(Path(path).read_bytes())
    start, end = ranges[1][0] + 40, ranges[4][0] + 25  # the tail of batch 1, all of 2 and 3, the head of 4
    data[start:end] = bytes(range(256)) * ((end - start) // 256) + bytes((end - start) % 256)
    Path(path).write_bytes(bytes(data))
    rows, messages = read_warning(path)
    assert rows == [r for k, n in enumerate([5, 9, 13, 7, 11, 4, 6]) if k not in (1, 2, 3, 4) for r in batch(k, n)]
    assert len(messages) == 1 and f"at byte {ranges[1][0]} (" in messages[0]
    assert "; its 40 rows are skipped" in messages[0]  # 9 + 13 + 7 + 11


def test_bytes_inserted_between_batches_lose_no_rows(tmp_path: Path) -> None:
    """500 inserted bytes were "about 3 rows" skipped: the batches around them account for every row."""
    path = str(tmp_path / "m.jsonl.gz")
    ranges = write_batches(path, 6)
    data = Path(path).read_bytes()
    at = ranges[3][0]
    Path(path).write_bytes(data[:at] + b"x" * 500 + data[at:])
    rows, messages = read_warning(path)
    assert rows == without(99, 6)
    assert messages == [f"{path}: bytes that are not a gzip member at byte {at} (500 bytes) could not be read; no "
                        "rows are skipped, every intact batch around it is read"]


def test_a_whole_batch_cut_out_of_the_file_is_reported(tmp_path: Path) -> None:
    """A batch's bytes removed exactly leave no unreadable stretch; the totals still say 20 rows are gone."""
    path = str(tmp_path / "m.jsonl.gz")
    ranges = write_batches(path, 5)
    data = Path(path).read_bytes()
    (start, end) = ranges[2]
    Path(path).write_bytes(data[:start] + data[end:])
    rows, messages = read_warning(path)
    assert rows == without(2, 5)
    assert messages == [f"{path}: batches are missing before the batch at byte {start} (their bytes were cut out); "
                        "20 rows are lost"]
