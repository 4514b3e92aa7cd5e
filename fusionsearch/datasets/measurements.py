"""Measured-kernel datasets: one file of concatenated gzip members, each member a batch of JSON-lines rows.

Appends are atomic in effect: a batch is compressed in memory and written with one write + fsync. A run
killed mid-write leaves at most a torn last member, which readers skip and `append` cuts off before writing,
so nothing already measured is lost and a resumed collection continues cleanly."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

# ok: valid and timed; compile_failed: did not compile or launch; invalid: wrong against the reference;
# timed_out: past the time limit; failed: faulted while running (an illegal address, a dead measurement worker).
STATUSES = ("ok", "compile_failed", "invalid", "timed_out", "failed")


def _members(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(end offset, decompressed bytes) of each complete gzip member; stops at the first torn one."""
    pos = 0
    while pos < len(data):
        d = zlib.decompressobj(wbits=31)
        try:
            out = d.decompress(data[pos:])
        except zlib.error:
            return
        if not d.eof:
            return
        end = len(data) - len(d.unused_data)
        yield end, out
        pos = end


def read_rows(path: str) -> list[dict[str, Any]]:
    """Every row of every complete batch; a missing file is an empty dataset."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    rows = []
    for _, text in _members(data):
        rows += [json.loads(line) for line in text.decode().splitlines() if line.strip()]
    return rows


def _good_length(path: str) -> int:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0
    ends = [end for end, _ in _members(data)]
    return ends[-1] if ends else 0


def append_rows(path: str, rows: Iterable[dict[str, Any]]) -> int:
    """Append one batch as a gzip member (after cutting off any torn tail); returns the rows written."""
    rows = list(rows)
    if not rows:
        return 0
    payload = gzip.compress("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode(), mtime=0)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    good = _good_length(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != good:
            os.ftruncate(fd, good)  # a torn batch from a killed run
        os.lseek(fd, good, os.SEEK_SET)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(rows)


def fp32_dot_of(row: dict[str, Any]) -> str:
    """How the row's fp32 matmuls multiplied (the code generator's `fp32_dot`): rows collected before rows
    recorded it were all measured with the IEEE dot."""
    return str(row.get("fp32_dot") or "ieee")


def _fp32_dot_template(row: dict[str, Any]) -> bool:
    f = row.get("features")
    return isinstance(f, dict) and f.get("kind_template") == 1 and f.get("a_bits") == 32


def rows_for_fp32_dot(rows: Iterable[dict[str, Any]], fp32_dot: str) -> list[dict[str, Any]]:
    """The rows that describe today's kernels when fp32 matmuls multiply with `fp32_dot`: every row of a plan
    without an fp32 matmul template, and of plans with one only the rows measured with that option (a plan
    may be in the file twice, measured with each)."""
    rows = list(rows)
    fp32_plans = {(r.get("graph_id"), r.get("plan_id")) for r in rows if _fp32_dot_template(r)}
    return [r for r in rows if (r.get("graph_id"), r.get("plan_id")) not in fp32_plans or fp32_dot_of(r) == fp32_dot]
