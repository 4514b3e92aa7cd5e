"""Never slower, step by step: the step the backend builds (its tuned regions joined inside one Inductor graph)
is timed against Inductor's own compilation of the whole graph Dynamo captured, in the mode the regions were
raced in, each replayed from a CUDA graph where the backend uses one; the faster runs the model.

Regions each at least as fast as Inductor's code for them need not make a step as fast as Inductor's: at a
region's boundary Inductor cannot fuse across, and a tuned region is one operator call whose inputs and outputs
are materialized. The model's step is what a user times, so that is what is raced; the outcome is stored in
the plan cache, so that a second process builds only the winner."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from fusionsearch.dynamo.race import INDUCTOR, OURS, Timer, inductor_options, us_text
from fusionsearch.errors import failure_reason

__all__ = ["StepChoice", "inductor_step", "race_step"]

log = logging.getLogger("fusionsearch.backend")


@dataclass(frozen=True)
class StepChoice:
    """The race of one compiled step: both times (µs a step; None where that candidate failed, `reason` says
    why), which was kept, the Inductor mode, and each candidate's profile summary (dynamo/profile.py: kernels,
    copies, memsets, busy and idle µs a step) where one was taken."""

    label: str
    chosen: str
    ours_us: float | None
    inductor_us: float | None
    mode: str
    reason: str = ""
    profiles: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: Any) -> StepChoice | None:
        """The record stored in the plan cache, or None when it is not one (another format, damaged)."""
        try:
            choice = StepChoice(**d)
        except TypeError:
            return None
        ok = (choice.chosen in (OURS, INDUCTOR) and isinstance(choice.profiles, dict)
              and all(t is None or isinstance(t, (int, float)) for t in (choice.ours_us, choice.inductor_us)))
        return choice if ok else None

    def explain(self) -> str:
        """Which step was kept and both times; the profiles' summaries beneath."""
        name = "fusionsearch's step" if self.chosen == OURS else f"Inductor's whole graph ({self.mode})"
        lines = [f"{self.label}: {name} kept (fusionsearch {us_text(self.ours_us)} us, inductor ({self.mode}) "
                 f"{us_text(self.inductor_us)} us a step)" + (f"; {self.reason}" if self.reason else "")]
        for who, s in self.profiles.items():
            lines.append(f"    {who}: {s['kernels']:.0f} kernels, {s['copies']:.0f} copies, {s['memsets']:.0f} "
                         f"memsets; GPU busy {s['busy_us']:.1f} us, idle {s['gap_us']:.1f} us a step")
        return "\n".join(lines)


def inductor_step(gm: fx.GraphModule, example_inputs: Sequence[torch.Tensor], mode: str, graphed: bool
                  ) -> Callable[..., list[torch.Tensor]]:
    """Inductor's compilation of Dynamo's whole graph in `mode`, returning its outputs flat; replayed from
    Inductor's own CUDA graphs (cudagraph trees) when `graphed`: exactly what torch.compile(mode=...) runs, so
    that a step that keeps it is PyTorch's step, not PyTorch's kernels behind the backend's graph and copies."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    with config.patch(inductor_options(mode, cudagraphs=graphed)):
        compiled = compile_fx(gm, list(example_inputs))

    def flat(*args: torch.Tensor) -> list[torch.Tensor]:
        leaves, _ = tree_flatten(compiled(*args))
        return leaves

    return flat


def race_step(label: str, candidates: dict[str, Callable[[], object]], timer: Timer, mode: str,
              written: Sequence[torch.Tensor], profile: bool = False, reasons: Sequence[str] = ()) -> StepChoice:
    """Time the candidate steps (OURS and INDUCTOR, zero-argument calls on the compile's example inputs) and
    keep the faster. The inputs a step writes in place (`written`: a KV cache) are restored afterwards, so
    the model's state is what it was. `profile`: also take each candidate's profile (GPU only)."""
    saved = [t.clone() for t in written]
    notes = list(reasons)
    profiles: dict[str, dict[str, float]] = {}
    try:
        ready = {}
        for name, fn in candidates.items():  # the first calls run, compile and capture: none of it timed
            try:
                fn()
                fn()
                ready[name] = fn
            except Exception as e:  # this step fails here: the other is kept
                notes.append(f"{name}: {failure_reason(e, 200)}")
        times = timer(ready) if ready else {}
        if profile:
            from fusionsearch.dynamo.profile import profile_step

            for name, fn in candidates.items():
                if name in times:
                    try:
                        profiles[name] = profile_step(fn, steps=5, warmup=1).summary()
                    except Exception as e:  # the profile is evidence, not a condition of the race
                        notes.append(f"{name} profile: {failure_reason(e, 120)}")
    finally:
        for t, s in zip(written, saved, strict=True):
            t.copy_(s)
    notes += [f"{name}: failed when timed" for name in ready if name not in times]
    if not times:
        raise RuntimeError(f"{label}: neither step ran ({'; '.join(notes)})")
    chosen = min(times, key=times.__getitem__)
    choice = StepChoice(label, chosen, times.get(OURS), times.get(INDUCTOR), mode, "; ".join(notes), profiles)
    log.info("fusionsearch backend: %s: fusionsearch %s us, inductor %s us a step: %s", label,
             us_text(choice.ours_us), us_text(choice.inductor_us), chosen)
    return choice
