"""What every benchmark script needs around its own measurements: the facts of the device and software a run
was made on, timing helpers, and writing its JSON, Markdown tables and PNG charts, so that each script holds
only what it measures and every result folder is written the same way.

Scripts import it as `benchmarks.harness` with the repository root on sys.path (they put it there, so that
`python benchmarks/X.py` works from the root without PYTHONPATH)."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

# ---- the device and software a run was made on ----------------------------------------------------------

GPU_QUERY = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu", "clocks_throttle_reasons.active")


def device_name(device: str = "cuda", cpu: str = "cpu") -> str:
    """The GPU's name for a CUDA run, else `cpu` (how the CPU smoke runs label themselves)."""
    return torch.cuda.get_device_name() if device == "cuda" else cpu


def run_facts(*fields: str, device: str = "cuda", cpu: str = "cpu", date: str | None = None) -> dict[str, str]:
    """The header of a result file: each of `fields` ("device", "torch", "triton", "python") in that order, then
    "date" when `date` is "utc" (ISO time to the second, UTC) or "day" (YYYY-MM-DD, local). Results are read
    against the machine and versions that made them, so every script writes them under the same keys."""
    facts: dict[str, str] = {}
    for field in fields:
        if field == "device":
            facts[field] = device_name(device, cpu)
        elif field == "torch":
            facts[field] = torch.__version__
        elif field == "triton":
            import triton

            facts[field] = triton.__version__
        elif field == "python":
            facts[field] = platform.python_version()
        else:
            raise ValueError(f"run_facts: unknown field {field!r}")
    if date == "utc":
        facts["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    elif date == "day":
        facts["date"] = datetime.date.today().isoformat()
    elif date is not None:
        raise ValueError(f"run_facts: date is 'utc', 'day' or None, not {date!r}")
    return facts


def gpu_state() -> dict[str, str]:
    """The GPU's SM and memory clocks, power draw, temperature and active throttle reasons from nvidia-smi
    (empty without it): what a time that drifts between two timings of one kernel is read against."""
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(GPU_QUERY)}", "--format=csv,noheader",
                               f"--id={torch.cuda.current_device()}"], capture_output=True, text=True, timeout=10)
    except Exception:  # no nvidia-smi, no CUDA device: nothing to read
        return {}
    values = [v.strip() for v in done.stdout.strip().split(",")]
    return dict(zip(GPU_QUERY, values, strict=True)) if done.returncode == 0 and len(values) == len(GPU_QUERY) else {}


def floor_us(nbytes: int, flops: int, ceilings: dict[str, float]) -> float:
    """The roofline floor (µs) of moving `nbytes` and computing `flops` at the bandwidth and peak that
    fusionsearch's measure_ceilings measured in the same run: no implementation can beat it."""
    return max(nbytes / ceilings["bandwidth_bytes_per_s"], flops / ceilings["peak_flops"]) * 1e6


# ---- timing --------------------------------------------------------------------------------------------

def timing_fields(t: Any) -> dict[str, Any]:
    """A fusionsearch Timing as the JSON fields the results carry (median_us, p20_us, p80_us, peak_bytes)."""
    return {"median_us": t.median_us, "p20_us": t.p20_us, "p80_us": t.p80_us, "peak_bytes": t.peak_bytes}


def wall_median_us(fn: Callable[[], object], reps: int = 3) -> float:
    """The median wall-clock time (µs) of `reps` calls after one warm call: the CPU smoke runs' stand-in for
    do_bench, which says the script ran, nothing of speed."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def interleaved_medians(fns: dict[str, Callable[[], object]], rounds: int,
                        timer: Callable[..., dict[str, list[float]]] | None = None
                        ) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Each callable's do_bench median in each of `rounds` interleaved rounds (fusionsearch's time_interleaved,
    or `timer` in its place), and the median over rounds of every callable timed in any: compared callables
    meet the GPU's drifting clock and temperature alike, where one pass met each at a different moment."""
    if timer is None:  # imported here: the rest of the harness needs nothing of fusionsearch
        from fusionsearch.measure.bench import time_interleaved

        timer = time_interleaved
    by_round = timer(fns, rounds=rounds)
    return by_round, {name: statistics.median(times) for name, times in by_round.items() if times}


def geomean(values: Sequence[float]) -> float:
    """The geometric mean (NaN for none): speedups and ratios are averaged on a log scale."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


# ---- arguments and files ---------------------------------------------------------------------------------

def add_out(ap: argparse.ArgumentParser, writes: str, default: str = "out") -> None:
    """The --out option every script has: the directory its files go to (made when first written)."""
    ap.add_argument("--out", default=default, help=f"directory for {writes} (default {default!r})")


def comma_list(text: str) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c']: the comma-separated options (--cases, --modes, ...)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def case_indices(text: str, count: int) -> list[int]:
    """--cases as indices into a list of `count` cases, in the order given (all of them for ''); ValueError
    with the reason for anything else."""
    try:
        indices = [int(item) for item in comma_list(text)]
    except ValueError:
        raise ValueError(f"--cases takes case indices such as 0,3,8; got {text!r}") from None
    if any(not 0 <= i < count for i in indices):
        raise ValueError(f"--cases: indices run from 0 to {count - 1}")
    return indices or list(range(count))


def out_file(out: str, name: str) -> str:
    """The path of `name` under the directory `out`, made if missing."""
    os.makedirs(out, exist_ok=True)
    return os.path.join(out, name)


def write_json(obj: Any, path: str, indent: int | None = 1, default: Callable[[Any], Any] | None = None) -> None:
    """Replace the file whole (written beside it, then renamed), so that a run killed mid-write leaves the
    previous complete record: scripts write their JSON again after every case."""
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=indent, default=default)
    os.replace(path + ".tmp", path)


def read_json(path: str) -> Any:
    """The JSON at `path`, or at `path`.gz where only that exists (benchmarks/results keeps large files gzipped)."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rt") as f:
            return json.load(f)
    with open(path) as f:
        return json.load(f)


def write_markdown(path: str, text: str) -> None:
    """The text as a file that ends in one newline."""
    with open(path, "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")


def md_row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def md_table(head: Sequence[str], rows: Iterable[Sequence[object]] = ()) -> list[str]:
    """A Markdown table's lines: the head, the separator, one line per row of cells."""
    return [md_row(head), "|" + "---|" * len(head), *(md_row(r) for r in rows)]


def progress(line: str) -> None:
    """One progress line on stderr, at once: stdout ends with the result table alone."""
    print(line, file=sys.stderr, flush=True)


# ---- charts ----------------------------------------------------------------------------------------------

def pyplot() -> Any:
    """matplotlib.pyplot drawing to files only (Agg), or None where matplotlib is not installed (a chart is
    a view of the JSON, never the only record)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(fig: Any, path: str, dpi: int = 120) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def bar_chart(path: str, groups: Sequence[str], series: dict[str, Sequence[float | None]], ylabel: str, *,
              title: str | None = None, baseline: float | None = None, size: tuple[float, float] = (8.0, 5.0),
              legend_size: int = 8) -> bool:
    """Grouped bars on a log scale, one group per case (x labels `groups`), one bar per series (None: no
    bar), a black line at `baseline`; the figure at least `size` inches, wider for many groups. False,
    and no file, without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(max(size[0], 1.3 * len(groups)), size[1]))
    for i, (label, values) in enumerate(series.items()):
        offset = (i - (len(series) - 1) / 2) * width
        bars = [(j + offset, v) for j, v in enumerate(values) if v is not None]
        ax.bar([x for x, _ in bars], [v for _, v in bars], width, label=label)
    if baseline is not None:
        ax.axhline(baseline, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=8)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=legend_size)
    save_figure(fig, path)
    return True


class WoqRewrite:
    """Inductor's post-grad rewrite of `F.linear(x, w.to(bf16)) * scales` (bf16 x and scales, int8 w) into
    `aten._weight_int8pack_mm` (`_register_woq_mm_int8_pattern1..4`, torch/_inductor/fx_passes/quantization.py)
    has no config switch short of `pattern_matcher=False` (every post-grad pattern off). Its CUDA kernel takes
    ~300 µs a 7B linear, so at M > 1, where max-autotune's mm decomposition does not pre-empt it, every compiled
    mode runs slower than eager (measured: h100-2026-12-07g-b16-no-woq). Its match check, looked up when Inductor
    first registers its patterns, is wrapped here (`install`, before any compile in the process) to decline while
    `off` is set: e2e.py's mode `max_autotune_no_woq`, int8_linear_gpu.py's second Inductor compile."""

    off = False

    @classmethod
    def install(cls) -> None:
        from torch._inductor.fx_passes import quantization

        make = quantization._is_valid_woq_optimization_pattern
        if getattr(make, "_fs_wrapped", False):
            return

        def wrapped_make() -> Callable[[Any], bool]:
            check = make()
            return lambda match: not cls.off and check(match)

        wrapped_make._fs_wrapped = True  # type: ignore[attr-defined]
        quantization._is_valid_woq_optimization_pattern = wrapped_make

    @classmethod
    def uncached(cls) -> Any:
        """While the rewrite is off, Inductor's on-disk caches are too: their keys do not know of the switch, so a
        graph max-autotune compiled earlier in the run would be reused."""
        if not cls.off:
            return contextlib.nullcontext()
        import torch._functorch.config
        import torch._inductor.config

        stack = contextlib.ExitStack()
        stack.enter_context(torch._inductor.config.patch(fx_graph_cache=False, fx_graph_remote_cache=False))
        stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
        return stack
