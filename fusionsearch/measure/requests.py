"""The values that cross to the compile and measurement workers (measure/isolate.py) and back: one frozen
dataclass per request and per answer, so that each side reads fields, not positions in a tuple.

A plan travels as a Candidate: its JSON (what a judge reads) and the content key of its module's source,
generated once by the caller (codegen.runtime.build) and kept in the kernel cache. A worker reads the source
back by that key (codegen.runtime.load_built: only a text that still hashes to it), so neither the compile
worker nor the measurement worker generates the plan again; the answers carry the key back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fusionsearch.measure.judge import Judgement


@dataclass(frozen=True)
class Candidate:
    """A plan to compile, judge or time again. key: its module's source key ('' when the caller generated
    none: the worker then generates it, once)."""

    plan_json: str
    key: str = ""

    @staticmethod
    def of(plan: Candidate | str) -> Candidate:
        """A plan JSON (scripts and older callers pass that) as a Candidate without a key."""
        return plan if isinstance(plan, Candidate) else Candidate(plan)


@dataclass(frozen=True)
class CompileRequest:
    """Compile worker: build `graph` (a spec; kept while the next requests bring the same one) and run the
    candidate once on zero inputs, so that Triton's cache holds its kernels."""

    graph: dict[str, Any]
    candidate: Candidate


@dataclass(frozen=True)
class CompileResponse:
    """reason: '' (compiled) or why not; lost: why the worker's CUDA context is gone ('' when it is not)."""

    key: str
    reason: str = ""
    lost: str = ""


@dataclass(frozen=True)
class SetupRequest:
    """Measurement worker: judge plans of `graph` from now on; inputs as torch.save bytes (None: drawn from
    `seed`); settings reach the judge as MeasureState.settings."""

    graph: dict[str, Any]
    inputs: bytes | None = None
    seed: int = 0
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SetupResponse:
    ready: bool
    reason: str = ""


@dataclass(frozen=True)
class JudgeRequest:
    """Validate and time one candidate; kernels: time each kernel alone too."""

    candidate: Candidate
    kernels: bool = False


@dataclass(frozen=True)
class JudgeResponse:
    key: str
    judgement: Judgement
    lost: str = ""


@dataclass(frozen=True)
class RetimeRequest:
    """Time candidates already judged again, side by side in `rounds` interleaved rounds."""

    candidates: tuple[Candidate, ...]
    rounds: int = 5


@dataclass(frozen=True)
class RetimeResponse:
    """us: per candidate, in order, its median over the rounds (None: not timed); reason: why nothing was."""

    keys: tuple[str, ...]
    us: tuple[float | None, ...]
    reason: str = ""
    lost: str = ""
