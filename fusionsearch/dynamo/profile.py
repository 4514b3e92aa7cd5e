"""Where a compiled step's GPU time goes: the kernels, copies and memsets of a few steps under torch.profiler,
summed per name and per step, and the time the GPU sits idle within them (host gaps: launches, syncs).

Two compilations of one model step (the backend's and Inductor's, say) are told apart by this accounting: how
many kernels a step launches, which take the time, and whether the GPU waits on the host between them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["KernelRow", "StepProfile", "profile_step", "side_by_side", "summarize"]

MEMCPY, MEMSET, KERNEL = "memcpy", "memset", "kernel"


@dataclass(frozen=True)
class KernelRow:
    """One kernel name's share of a step: launches a step, GPU µs a step, and what it is (kernel, memcpy or
    memset)."""

    name: str
    kind: str
    calls: float
    us: float


@dataclass(frozen=True)
class StepProfile:
    """A step's GPU activity, averaged over `steps` profiled steps: the rows by GPU time (largest first),
    `busy_us` the time some activity ran, `span_us` from a step's first activity to the next step's (so the
    host's time between steps counts as a gap), both per step (µs)."""

    steps: int
    span_us: float
    busy_us: float
    rows: tuple[KernelRow, ...]

    @property
    def gap_us(self) -> float:
        """µs a step the GPU is idle between its activities: host launch cost not hidden by the GPU's work."""
        return max(self.span_us - self.busy_us, 0.0)

    def count(self, kind: str) -> float:
        """Launches a step of `kind` (kernel, memcpy or memset)."""
        return sum(r.calls for r in self.rows if r.kind == kind)

    def us(self, kind: str) -> float:
        """GPU µs a step in activities of `kind`."""
        return sum(r.us for r in self.rows if r.kind == kind)

    def summary(self) -> dict[str, float]:
        """The figures a report shows beside the step time: counts and µs per step."""
        return {"kernels": self.count(KERNEL), "kernel_us": self.us(KERNEL), "copies": self.count(MEMCPY),
                "copy_us": self.us(MEMCPY), "memsets": self.count(MEMSET), "busy_us": self.busy_us,
                "span_us": self.span_us, "gap_us": self.gap_us}

    def line(self) -> str:
        """One line: kernels, copies, memsets a step, busy and idle µs."""
        s = self.summary()
        return (f"{s['kernels']:.0f} kernels ({s['kernel_us']:.1f} us), {s['copies']:.0f} copies "
                f"({s['copy_us']:.1f} us), {s['memsets']:.0f} memsets; GPU busy {s['busy_us']:.1f} us of a "
                f"{s['span_us']:.1f} us step, idle {s['gap_us']:.1f} us")

    def to_dict(self) -> dict[str, object]:
        return {"steps": self.steps, "span_us": self.span_us, "busy_us": self.busy_us, "summary": self.summary(),
                "rows": [asdict(r) for r in self.rows]}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> StepProfile:
        """The profile `to_dict` wrote (a report's JSON)."""
        return StepProfile(int(d["steps"]), float(d["span_us"]), float(d["busy_us"]),
                           tuple(KernelRow(**r) for r in d["rows"]))


def _kind(name: str) -> str:
    low = name.lower()
    if low.startswith("memcpy"):
        return MEMCPY
    if low.startswith("memset"):
        return MEMSET
    return KERNEL


def summarize(activities: Iterable[tuple[str, float, float]], steps: int) -> StepProfile:
    """A StepProfile from GPU activities (name, start µs, end µs) recorded over `steps` steps."""
    acts = sorted(activities, key=lambda a: a[1])
    if steps < 1:
        raise ValueError("steps must be at least 1")
    per: dict[str, list[float]] = {}
    busy, end = 0.0, None
    for name, start, stop in acts:
        entry = per.setdefault(name, [0.0, 0.0])
        entry[0] += 1
        entry[1] += stop - start
        if end is None or start >= end:  # the union of the intervals: what ran, overlaps counted once
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    span = (max(a[2] for a in acts) - acts[0][1]) if acts else 0.0
    rows = tuple(sorted((KernelRow(n, _kind(n), c / steps, t / steps) for n, (c, t) in per.items()),
                        key=lambda r: (-r.us, r.name)))
    return StepProfile(steps, span / steps, busy / steps, rows)


def profile_step(fn: Callable[[], object], steps: int = 10, warmup: int = 3) -> StepProfile:
    """`fn` (one step) called `steps` times back to back under torch.profiler, after `warmup` calls; the GPU's
    kernels, copies and memsets per step (kernels replayed from a CUDA graph included). Needs a CUDA GPU."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    acts = [(e.name, float(e.time_range.start), float(e.time_range.end)) for e in prof.events()
            if e.device_type == DeviceType.CUDA]
    return summarize(acts, steps)


def side_by_side(profiles: dict[str, StepProfile], top: int = 20) -> str:
    """Markdown: the summary of each profile in one table, then each one's `top` rows by GPU time."""
    names = list(profiles)
    lines = ["| per step | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    keys = ("kernels", "kernel_us", "copies", "copy_us", "memsets", "busy_us", "span_us", "gap_us")
    for key in keys:
        lines.append(f"| {key} | " + " | ".join(f"{profiles[n].summary()[key]:.1f}" for n in names) + " |")
    for n in names:
        lines += ["", f"{n}: the {top} largest of {len(profiles[n].rows)} names (µs and launches a step)", "",
                  "| kernel | kind | launches | µs |", "|---|---|---|---|"]
        lines += [f"| `{_short(r.name)}` | {r.kind} | {r.calls:.1f} | {r.us:.1f} |" for r in profiles[n].rows[:top]]
    return "\n".join(lines)


def _short(name: str, width: int = 90) -> str:
    name = name.replace("|", "/").replace("`", "'")
    return name if len(name) <= width else name[:width - 1] + "…"

