"""The shared base of the kinds' config values (the template's tile config, the decode and grouped matmuls'):
each declares its fields, one bounds table and one label format, and the base checks the table once, writes and
reads the label by that one format, reads the plan file's object and counts the pipeline's shared memory, so that
no kind repeats them."""

from __future__ import annotations

import functools
import re
import string
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, TypeVar

from fusionsearch.errors import PlanError, SpecError
from fusionsearch.graph.registry import show

C = TypeVar("C", bound="KernelConfig")


@dataclass(frozen=True)
class KernelConfig:
    """A kind's config: a frozen dataclass of integers (and the kind's own words and flags) that a search
    offers, a plan file holds (its fields) and a choice label names (`short()`)."""

    WHAT: ClassVar[str]  # its name in messages ("tile config")
    BOUNDS: ClassVar[dict[str, tuple[int, int]]]  # each integer field's (least, most)
    POWERS_OF_TWO: ClassVar[tuple[str, ...]] = ()
    # The label: its fields as {name} (integers as digits, words as one word); each bool field in FLAGS follows
    # as " <name>" when set.
    LABEL: ClassVar[str]
    FLAGS: ClassVar[tuple[str, ...]] = ()
    # How an integer out of BOUNDS is told: "an integer in [least, most]" in one check (RANGED), or "a positive
    # integer", then powers of two, then check_least, then "at most".
    RANGED: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.check_form()
        for name, (least, most) in self.BOUNDS.items():
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, int)
                    or value < (least if self.RANGED else 1) or (self.RANGED and value > most)):
                rule = f"an integer in [{least}, {most}]" if self.RANGED else "a positive integer"
                raise PlanError(f"{self.WHAT} {name} must be {rule}, got {show(value)}")
        for name in self.POWERS_OF_TWO:
            value = getattr(self, name)
            if value & (value - 1):
                raise PlanError(f"{self.WHAT} {name} must be a power of two, got {show(value)}")
        self.check_least()
        for name, (_, most) in self.BOUNDS.items():
            if getattr(self, name) > most:
                raise PlanError(f"{self.WHAT} {name} must be at most {most}, got {show(getattr(self, name))}")

    def check_form(self) -> None:
        """PlanError for a field outside BOUNDS that is wrong (checked first; none by default)."""

    def check_least(self) -> None:
        """PlanError for an integer below its least (after the powers of two): by default BOUNDS' least."""
        for name, (least, _) in self.BOUNDS.items():
            if getattr(self, name) < least:
                raise PlanError(f"{self.WHAT} {name} must be at least {least}, got {show(getattr(self, name))}")

    def pipeline_rows(self) -> int:
        """Rows of the A block the software pipeline buffers (BLOCK_M, or the most a kind runs)."""
        raise NotImplementedError

    def shared_memory_bytes(self, itemsize: int) -> int:
        """Shared memory of the software pipeline (bytes): `num_stages` buffers of one A and one B block of
        `itemsize`-byte elements (what costmodel.analytic.smem_bytes counts, and Triton allocates); every config
        has these three fields."""
        stages, block_k, block_n = (getattr(self, name) for name in ("num_stages", "block_k", "block_n"))
        return int(stages * (self.pipeline_rows() * block_k + block_k * block_n) * itemsize)

    def short(self) -> str:
        """Its label (a search-space choice; plans print it)."""
        return self.LABEL.format(**vars(self)) + "".join(f" {flag}" for flag in self.FLAGS if getattr(self, flag))

    @classmethod
    def from_short(cls: type[C], label: str) -> C:
        """The config `short()` wrote; PlanError when `label` is not one."""
        pattern, kinds = _label_pattern(cls)
        found = pattern.fullmatch(label)
        if found is None:
            raise PlanError(f"{label!r} is not a {cls.WHAT} label (like {cls().short()!r})")
        values = dict(zip(kinds, found.groups(), strict=True))
        return cls(**{name: int(v) if name in cls.BOUNDS else v is not None if name in cls.FLAGS else v
                      for name, v in values.items()})

    def to_dict(self) -> dict[str, Any]:
        """Its plan-file object: its fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls: type[C], d: object, where: str) -> C:
        """The config a plan file's object describes: SpecError naming `where` when it is not an object of its
        fields; PlanError (unprefixed) for a bad value."""
        known = sorted(f.name for f in fields(cls))
        if not isinstance(d, dict) or set(d) - set(known):
            raise SpecError(f"{where}: 'config' must be an object with keys {known}")
        return cls(**d)


@functools.cache
def _label_pattern(cls: type[KernelConfig]) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """The regular expression of `cls.LABEL` (and its flags) and the field each group reads."""
    parts, names = [], []
    for literal, name, _, _ in string.Formatter().parse(cls.LABEL):
        parts.append(re.escape(literal))
        if name is not None:
            parts.append(r"(\d+)" if name in cls.BOUNDS else r"(\w+)")
            names.append(name)
    for flag in cls.FLAGS:
        parts.append(f"( {re.escape(flag)})?")
        names.append(flag)
    return re.compile("".join(parts)), tuple(names)
