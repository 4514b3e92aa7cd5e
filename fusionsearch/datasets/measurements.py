"""Measured-kernel datasets: one file of concatenated gzip members, each member a batch of JSON-lines rows.

Nothing measured is ever lost to damage: readers walk the members one by one, skip a damaged or torn member
(or a line that is not a JSON row) with a DatasetWarning naming its byte offset and the rows lost, and read
every intact member after it. Appending only ever adds bytes at the end (a torn batch from a killed run stays,
skipped, before the new one), one batch per write + fsync, and refuses a file that is not a dataset. Each
member records in its gzip header (FEXTRA subfields) its row count and the rows written to the file up to and
with it, so that what a damaged stretch lost is counted exactly from the intact batches around it, whatever it
held (several batches whose headers are gone, or inserted bytes that held none). Where that cannot be known (a
stretch at the end of the file: at least the rows its readable headers name; members written before the headers
carried counts: estimated from the size) the warning says so."""

from __future__ import annotations

import json
import mmap
import os
import struct
import warnings
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from fusionsearch.errors import CostModelError, SpecError

# ok: valid and timed; compile_failed: did not compile or launch; invalid: wrong against the reference;
# timed_out: past the time limit; failed: faulted while running (an illegal address, a dead measurement worker).
STATUSES = ("ok", "compile_failed", "invalid", "timed_out", "failed")

_MAGIC = b"\x1f\x8b\x08"  # gzip's ID bytes and its one compression method, deflate: where a member can begin
_ROWS_FIELD = b"FS"  # the FEXTRA subfield holding a member's row count (uint32, little-endian)
_TOTAL_FIELD = b"FT"  # the one holding the rows written to the file up to and with this member (uint64)
_CHUNK = 1 << 16  # bytes fed to the decompressor at a time: a member's end is found without copying the file


class DatasetWarning(UserWarning):
    """Part of a measurements dataset could not be read and was skipped (the rest was read)."""


@dataclass(frozen=True)
class Damage:
    """A stretch of a dataset that could not be read: `size` bytes at byte `offset`, holding `rows` rows (None:
    unknown), a count that is `how`: "exact", "at least" or "estimated" (from its size)."""

    offset: int
    size: int
    rows: int | None
    how: str
    what: str

    def describe(self, path: str) -> str:
        rows, verb = (f"{self.rows} row", "is") if self.rows == 1 else (f"{self.rows} rows", "are")
        lost = "an unknown number of rows are" if self.rows is None else "no rows are" if self.rows == 0 else \
            f"its {rows} {verb}" if self.how == "exact" else f"at least {rows} {verb}" if self.how == "at least" \
            else f"an estimated {rows} (from its size) {verb}"
        if not self.size:
            return (f"{path}: {self.what} at byte {self.offset} (their bytes were cut out); "
                    f"{lost.removeprefix('its ')} lost")
        return (f"{path}: {self.what} at byte {self.offset} ({self.size} bytes) could not be read; {lost} skipped, "
                "every intact batch around it is read")


@dataclass(frozen=True)
class DatasetRead:
    """What a dataset file holds: its readable rows in file order and the stretches that could not be read."""

    rows: list[dict[str, Any]]
    damage: list[Damage]


def _inflate(buf: bytes | mmap.mmap, pos: int) -> tuple[int, bytes] | None:
    """(end offset, contents) of the intact gzip member starting at byte `pos`; None where none starts there or
    it is damaged or torn (a bad deflate stream, CRC or length, or the file ends inside it)."""
    d = zlib.decompressobj(wbits=31)
    parts: list[bytes] = []
    p = pos
    try:
        while not d.eof:
            if p >= len(buf):
                return None
            chunk = buf[p:p + _CHUNK]
            parts.append(d.decompress(chunk))
            p += len(chunk)
    except zlib.error:
        return None
    return p - len(d.unused_data), b"".join(parts)


def _walk(buf: bytes | mmap.mmap) -> Iterator[tuple[int, int, bytes | None]]:
    """(start, end, contents) of each intact member and (start, end, None) of each stretch that is not one, in
    file order. After a bad stretch the next member is the first place holding gzip's magic bytes from which an
    intact member decompresses: its CRC makes a false start inside the damage all but impossible."""
    pos = 0
    while pos < len(buf):
        got = _inflate(buf, pos)
        if got is not None:
            yield pos, got[0], got[1]
            pos = got[0]
            continue
        nxt = pos
        while got is None:
            nxt = buf.find(_MAGIC, nxt + 1)
            if nxt < 0:
                break
            got = _inflate(buf, nxt)
        yield pos, nxt if got is not None else len(buf), None
        if got is None:
            return
        yield nxt, got[0], got[1]
        pos = got[0]


def _parse(contents: bytes) -> tuple[list[dict[str, Any]], list[int]]:
    """The rows of one member's JSON lines and the numbers (from 1) of its lines that are not JSON objects."""
    rows: list[dict[str, Any]] = []
    bad: list[int] = []
    for number, line in enumerate(contents.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:  # not JSON, or not UTF-8
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad.append(number)
    return rows, bad


def _header_counts(buf: bytes | mmap.mmap, pos: int) -> tuple[int | None, int | None]:
    """(row count, rows written up to and with it) that a member starting at `pos` records in its header; None
    for each it does not record (a member written before it was recorded, or no member header there)."""
    head = buf[pos:pos + 12]
    if len(head) < 12 or head[:3] != _MAGIC or not head[3] & 4:  # FLG.FEXTRA
        return None, None
    extra = buf[pos + 12:pos + 12 + struct.unpack("<H", head[10:12])[0]]
    fields = {}
    i = 0
    while i + 4 <= len(extra):
        length = struct.unpack("<H", extra[i + 2:i + 4])[0]
        fields[bytes(extra[i:i + 2])] = bytes(extra[i + 4:i + 4 + length])
        i += 4 + length
    rows, total = fields.get(_ROWS_FIELD, b""), fields.get(_TOTAL_FIELD, b"")
    return (struct.unpack("<I", rows)[0] if len(rows) == 4 else None,
            struct.unpack("<Q", total)[0] if len(total) == 8 else None)


def _rows_written(buf: bytes | mmap.mmap) -> int:
    """The rows written to the file so far: the total the last member header records (a torn last batch's
    included), else, for a file of members that record none, the rows that can be read."""
    pos = len(buf)
    while (pos := buf.rfind(_MAGIC, 0, pos)) >= 0:
        total = _header_counts(buf, pos)[1]
        if total is not None:
            return total
    return sum(len(_parse(contents)[0]) for _, _, contents in _walk(buf) if contents is not None)


def _member(rows: list[dict[str, Any]], before: int = 0) -> bytes:
    """One batch as a gzip member (what gzip.compress writes at level 9, mtime 0) with its row count and the
    rows written up to and with it (`before` + its own) in the header."""
    data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()
    extra = _ROWS_FIELD + struct.pack("<HI", 4, len(rows)) + _TOTAL_FIELD + struct.pack("<HQ", 8, before + len(rows))
    header = _MAGIC + bytes([4]) + struct.pack("<I", 0) + b"\x02\xff" + struct.pack("<H", len(extra)) + extra
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(data) + deflate.flush()
    return header + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


class _Mapped:
    """A file's bytes, mapped read-only (b"" for an empty file): the file is never read whole into memory."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "rb")
        try:
            size = os.fstat(self._file.fileno()).st_size
            self.buf: bytes | mmap.mmap = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except BaseException:
            self._file.close()
            raise

    def __enter__(self) -> bytes | mmap.mmap:
        return self.buf

    def __exit__(self, *exc: object) -> None:
        if isinstance(self.buf, mmap.mmap):
            self.buf.close()
        self._file.close()


def read_dataset(path: str) -> DatasetRead:
    """Every readable row, and what could not be read; a missing file is an empty dataset."""
    try:
        mapped = _Mapped(path)
    except FileNotFoundError:
        return DatasetRead([], [])
    rows: list[dict[str, Any]] = []
    damage: list[Damage] = []
    intact_bytes = 0
    with mapped as buf:
        stretches = list(_walk(buf))  # intact members and unreadable stretches alternate
        for start, end, contents in stretches:
            if contents is None:
                continue
            got, bad = _parse(contents)
            rows += got
            intact_bytes += end - start
            if bad:
                lines = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
                damage.append(Damage(start, end - start, len(bad), "exact", f"a batch with {len(bad)} lines that "
                                     f"are not JSON rows (line{'s' if len(bad) > 1 else ''} {lines})"))
        for i, (start, end, contents) in enumerate(stretches):
            if contents is not None and i and stretches[i - 1][2] is not None:  # two intact batches in a row
                (_, before), (count, total) = _header_counts(buf, stretches[i - 1][0]), _header_counts(buf, start)
                if before is not None and count is not None and total is not None and total - count > before:
                    damage.append(Damage(start, 0, total - count - before, "exact",
                                         "batches are missing before the batch"))
            if contents is None:
                before = 0 if i == 0 else _header_counts(buf, stretches[i - 1][0])[1]
                after = _header_counts(buf, end) if i + 1 < len(stretches) else None
                lost, how = _lost(buf, start, end, before, after)
                if how == "estimated":  # from the rows per byte of the intact batches; a batch holds a row at least
                    lost = max(1, round((end - start) * len(rows) / intact_bytes)) if intact_bytes else None
                what = "a damaged or torn batch (gzip member)" if buf[start:start + 3] == _MAGIC else \
                    "bytes that are not a gzip member"
                damage.append(Damage(start, end - start, lost, how, what))
    return DatasetRead(rows, sorted(damage, key=lambda d: d.offset))


def _lost(buf: bytes | mmap.mmap, start: int, end: int, before: int | None,
          after: tuple[int | None, int | None] | None) -> tuple[int | None, str]:
    """(rows, how counted) that the unreadable stretch [start, end) held: exactly, from the totals of the intact
    members around it (`before`: rows written up to the stretch, 0 at the file's start, None when unrecorded;
    `after`: the next intact member's (row count, total), None at the end of the file); else at least what the
    member headers inside it record; else ("estimated") to be estimated from its size."""
    if before is not None and after is not None and after[0] is not None and after[1] is not None \
            and after[1] - after[0] >= before:
        return after[1] - after[0] - before, "exact"
    starts = [start] if buf[start:start + 3] == _MAGIC else []
    while (nxt := buf.find(_MAGIC, (starts or [start])[-1] + 1, end)) >= 0:
        starts.append(nxt)
    counts = [_header_counts(buf, s) for s in starts]
    totals = [t for _, t in counts if t is not None]
    if before is not None and totals and max(totals) >= before:  # every batch written before the last one named
        return max(totals) - before, "at least"
    if counts and counts[0][0] is not None:
        return sum(c or 0 for c, _ in counts), "at least"
    return None, "estimated"


def read_rows(path: str) -> list[dict[str, Any]]:
    """Every row of every intact batch, warning (DatasetWarning) of each part that could not be read; a missing
    file is an empty dataset."""
    got = read_dataset(path)
    for d in got.damage:
        warnings.warn(DatasetWarning(d.describe(path)), stacklevel=2)
    return got.rows


def check_appendable(path: str) -> None:
    """CostModelError unless `path` is missing, empty or a dataset: its first intact batch is JSON rows, or it
    has none (a first batch torn by a kill) but begins as a gzip member does. append_rows calls it; a collector
    calls it before measuring anything, so that a wrong path costs no measurements."""
    why = _not_a_dataset(path)
    if why is not None:
        raise CostModelError(f"{path} is not a measurements dataset ({why}); nothing was appended and the file is "
                             "unchanged: give a new file or one written by `fusionsearch costmodel collect`")


def check_dataset(path: str) -> None:
    """SpecError unless `path` is a dataset to read: an existing file, empty or holding rows (check_appendable's
    test), refused before anything is computed from it."""
    if not os.path.exists(path):
        raise SpecError(f"{path}: no such dataset file")
    if not os.path.isfile(path):
        raise SpecError(f"{path}: not a dataset file ({'a directory' if os.path.isdir(path) else 'not a file'})")
    why = _not_a_dataset(path)
    if why is not None:
        raise SpecError(f"{path} is not a measurements dataset ({why}): give a file `fusionsearch costmodel "
                        "collect` wrote")


def _not_a_dataset(path: str) -> str | None:
    """Why `path` is not a dataset to append to; None when it is one, is empty or is missing."""
    try:
        mapped = _Mapped(path)
    except FileNotFoundError:
        return None
    with mapped as buf:
        if not buf:
            return None
        for _, _, contents in _walk(buf):
            if contents is None:
                continue
            rows, bad = _parse(contents)
            if bad:
                return "its first intact gzip member does not hold JSON rows"
            if rows:
                return None
        if buf[:3] == _MAGIC:
            return None
        return "it does not begin with a gzip member"


def append_rows(path: str, rows: Iterable[dict[str, Any]]) -> int:
    """Append one batch as a gzip member after whatever the file holds (nothing is cut or rewritten: a torn or
    damaged batch stays where it is, skipped by readers); returns the rows written. CostModelError, the file
    unchanged, when `path` is not a dataset."""
    rows = list(rows)
    if not rows:
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if os.path.isdir(path):
        raise CostModelError(f"{path} is a directory, not a measurements dataset file")
    check_appendable(path)
    try:
        with _Mapped(path) as buf:
            payload = _member(rows, _rows_written(buf))
    except FileNotFoundError:
        payload = _member(rows)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
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
