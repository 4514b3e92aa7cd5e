"""End to end (issue 23): whole decoders through torch.compile, fusionsearch's backend against eager PyTorch and
every torch.compile mode, in one process and one run.

Models (benchmarks/models, gpt-fast's math, random weights): a Llama-2-7B-shaped decoder (dim 4096, 32 heads,
hidden 11008, --layers of them, default 8; a KV cache of 1,024 positions written in place) in bf16 and with
int8 weight-only linears, at decode (batch 1, 4, 16; one token a step) and prefill (512 tokens); and a
Mixtral-shaped MoE block (dim 4096, hidden 14336, 8 experts, top-2) at decode batch 1 and 16.

For each case and mode: the first call's time (compile, and for fusionsearch its search: `tune_s`); every
output of --steps steps from the same cache state checked against eager (the logits of each step and, for the
decoders, every layer's KV cache afterwards), each against a float32 copy of the model run eagerly: a mode is valid
when its error is at most twice eager's own (bf16 rounding over whole layers is ~2e-2, far above one op's
1e-2) plus 1e-3, and its error against eager is kept beside it); then one step timed with do_bench
(µs per step, median) and its tokens/s; peak memory of a step beyond what was allocated before it, and what the
mode keeps allocated (CUDA-graph pools included). The decoder cases also state the bytes of weights a step
reads and that over the step time as a share of the bandwidth a device copy reaches in the same run.

Run on the GPU machine (optuna from ../shared/device/wheels.sh on PYTHONPATH):
    PYTHONPATH=/tmp/site:$PWD python benchmarks/e2e.py --out $OUT [--cases "llama-int8 decode b16,..."]
        [--modes eager,...] [--layers 8] [--trials 16] [--deadline-s 540]
Writes e2e.json after every mode (a run killed by a time limit keeps what it measured; --out of an earlier run
is merged: rows of other cases are kept), e2e.md and e2e.png; the table last on stdout.
On a CPU (a smoke run of the script itself: tiny models, float32, Triton's interpreter, wall-clock timing):
    TRITON_INTERPRET=1 python benchmarks/e2e.py --out /tmp/e2e --device cpu --preset tiny
Render the report of a committed e2e.json again:  python benchmarks/e2e.py --report DIR"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import (  # noqa: E402
    WoqRewrite,
    add_out,
    bar_chart,
    comma_list,
    geomean,
    md_row,
    md_table,
    out_file,
    progress,
    read_json,
    run_facts,
    timing_fields,
    wall_median_us,
    write_json,
    write_markdown,
)
from benchmarks.models import llama, moe  # noqa: E402

MODES = ("eager", "torch_compile", "reduce_overhead", "max_autotune", "max_autotune_no_woq",
         "max_autotune_no_cudagraphs", "fusionsearch_control", "fusionsearch_joined", "fusionsearch")
# The backend three ways: every region given Inductor's code (the control: what joining regions costs), the tuned
# regions joined as the backend builds the step, and the default (that step raced against Inductor's whole graph).
BACKEND_MODES = {"fusionsearch_control": {"inductor_regions": True, "step_race": False},
                 "fusionsearch_joined": {"step_race": False}, "fusionsearch": {}}
TORCH_MODES = {"torch_compile": "default", "reduce_overhead": "reduce-overhead", "max_autotune": "max-autotune",
               "max_autotune_no_woq": "max-autotune",
               "max_autotune_no_cudagraphs": "max-autotune-no-cudagraphs"}
CASES = ("llama-int8 decode b1", "llama-int8 decode b4", "llama-int8 decode b16", "llama-bf16 decode b1",
         "llama-bf16 decode b4", "llama-bf16 decode b16", "llama-bf16 prefill 512", "moe-bf16 decode b1",
         "moe-bf16 decode b16", "hfllama-int8 decode b1", "hfllama-int8 decode b4", "hfllama-int8 decode b16",
         "hfllama-bf16 decode b1", "hfllama-bf16 decode b16", "hfmixtral-bf16 decode b1", "hfmixtral-bf16 decode b16")
DECODERS = ("llama", "hfllama", "hfmixtral")  # models with a KV cache: decode steps, caches checked
HF = ("hfllama", "hfmixtral")  # transformers' own code (benchmarks/models/hf.py)
TOLERANCE = 1e-2  # bf16, relative (Frobenius) against eager: the bar only where no float32 reference ran
FLOAT32_SLACK = 1e-3  # a mode may differ from the float32 run by twice eager's own error plus this


@dataclass(frozen=True)
class Case:
    """One row: the model ('llama' or 'moe', written here in gpt-fast's form; 'hfllama' or 'hfmixtral',
    transformers' own code), int8 weights or not, batch and tokens a step."""

    name: str
    model: str
    int8: bool
    batch: int
    tokens: int

    @staticmethod
    def parse(name: str) -> Case:
        model, kind, shape = name.split()
        family, dtype = model.split("-")
        if family not in ("moe", *DECODERS) or dtype not in ("bf16", "int8") or kind not in ("decode", "prefill"):
            raise ValueError(f"case {name!r}: write 'llama-int8 decode b16', 'llama-bf16 prefill 512', 'moe-bf16 ...'")
        number = int(shape.lstrip("b"))
        batch, tokens = (number, 1) if kind == "decode" else (1, number)
        return Case(name, family, dtype == "int8", batch, tokens)


@dataclass(frozen=True)
class Setup:
    device: str
    dtype: torch.dtype
    preset: str
    layers: int

    @property
    def gpu(self) -> bool:
        return self.device == "cuda"


class Workload:
    """A case's model, its step's inputs, and the state a step starts from (the caches after a prefill)."""

    def __init__(self, case: Case, setup: Setup) -> None:
        self.case, self.setup = case, setup
        gen = torch.Generator().manual_seed(1)
        if case.model in DECODERS:
            vocab = self._build_decoder(case, setup)
            tokens = min(case.tokens, self.cache_len // 2)  # the tiny preset's cache holds 32 positions
            start = self.cache_len // 2 if tokens == 1 else 0  # decode steps meet a half-full cache
            steps = 4 if tokens == 1 else 1
            self.positions = [torch.arange(start + i * tokens, start + (i + 1) * tokens, device=setup.device)
                              for i in range(steps)]
            self.inputs = [(torch.randint(0, vocab, (case.batch, tokens), generator=gen)
                            .to(setup.device), pos) for pos in self.positions]
            with torch.no_grad():  # a context in the caches, as a decode step meets it
                for k in self.caches():
                    k.normal_(generator=None)
            self.state = [c.clone() for c in self.caches()]
        else:
            args = moe.mixtral() if setup.preset == "full" else moe.tiny()
            self.model = moe.build(args, setup.dtype, setup.device)
            self.inputs = [(torch.randn(case.batch * case.tokens, args.dim, generator=gen).to(setup.device,
                                                                                              setup.dtype),)
                           for _ in range(4)]
            self.state = []

    def _build_decoder(self, case: Case, setup: Setup) -> int:
        """The decoder of `case` in self.model with its KV cache allocated (self.cache_len positions); returns
        its vocabulary size."""
        full = setup.preset == "full"
        if case.model == "llama":
            args = llama.llama2_7b(setup.layers) if full else llama.tiny(setup.layers)
            self.model = llama.build(args, setup.dtype, setup.device)
            if case.int8:
                llama.quantize_int8(self.model)
            self.model.setup_caches(case.batch, setup.dtype, setup.device)
            self.cache_len = args.max_seq_len
            return args.vocab_size
        from benchmarks.models import hf

        config = ((hf.llama2_7b_config if case.model == "hfllama" else hf.mixtral_config)(setup.layers) if full
                  else hf.tiny_config(case.model, setup.layers))
        self.cache_len = 1024 if full else 32
        self.model = hf.build(case.model, config, case.batch, self.cache_len, setup.dtype, setup.device)
        if case.int8:
            llama.quantize_int8(self.model.model)  # gpt-fast's WeightOnlyInt8Linear on its nn.Linear layers
        with torch.no_grad():  # transformers allocates a StaticCache's tensors at the first step
            self.model(torch.zeros(case.batch, 1, dtype=torch.long, device=setup.device),
                       torch.zeros(1, dtype=torch.long, device=setup.device))
        return int(config.vocab_size)

    def caches(self, model: torch.nn.Module | None = None) -> list[torch.Tensor]:
        """Every layer's KV cache of `model` (default: the case's own; the float32 check passes its copy)."""
        model = model or self.model
        if self.case.model in HF:
            return model.caches()
        if self.case.model != "llama":
            return []
        return [t for layer in model.layers
                for t in (layer.attention.kv_cache.k_cache, layer.attention.kv_cache.v_cache)]

    def reset(self) -> None:
        for cache, saved in zip(self.caches(), self.state, strict=True):
            cache.copy_(saved)

    def weight_bytes(self) -> int:
        """Bytes of weights one step reads: every parameter and buffer but the caches, the RoPE table, the mask
        and the embedding table (a step reads only its tokens' rows); for the MoE block the top-k experts'
        weights of each token at most (all experts when the batch routes to all of them)."""
        skip = {id(t) for t in self.caches()}
        total, experts = 0, 0
        for name, t in [*self.model.named_parameters(), *self.model.named_buffers()]:
            if id(t) in skip or name.rsplit(".", 1)[-1] in ("freqs_cis", "causal_mask", "inv_freq") or \
                    "tok_embeddings" in name or "embed_tokens" in name:
                continue
            if self.case.model == "moe" or ".experts." in name:
                experts += t.numel() * t.element_size()
            else:
                total += t.numel() * t.element_size()
        if experts:
            n_experts, top = (8, 2) if self.setup.preset == "full" else (4, 2)
            touched = min(n_experts, self.case.batch * self.case.tokens * top)
            total += experts * touched // n_experts
        return total


def compile_mode(model: torch.nn.Module, mode: str, args: argparse.Namespace) -> tuple[Callable[..., Any], Any]:
    """The model as `mode` runs it, and the fusionsearch backend object (None for the other modes)."""
    if mode == "eager":
        return model, None
    if mode in TORCH_MODES:
        return torch.compile(model, mode=TORCH_MODES[mode], fullgraph=True, dynamic=False), None
    import fusionsearch as fs

    be = fs.backend(trials=args.trials, cache=args.cache, inductor=args.inductor,
                    search_backend="auto" if args.device == "cuda" else "model", **BACKEND_MODES[mode])
    return torch.compile(model, backend=be, fullgraph=True, dynamic=False), be


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    o, r = out.double(), ref.double()
    if o.shape != r.shape or not torch.isfinite(o).all():
        return float("inf")
    return float((o - r).norm() / max(float(r.norm()), 1e-30))


def sync(setup: Setup) -> None:
    if setup.gpu:
        torch.cuda.synchronize()


def time_step(fn: Callable[[], Any], setup: Setup) -> dict[str, float]:
    """µs per call: do_bench's median on a GPU (with the peak memory of one call), wall clock on the CPU."""
    if setup.gpu:
        from fusionsearch.measure import time_callable

        return timing_fields(time_callable(fn))
    return {"median_us": wall_median_us(fn)}


def max_error(outs: list[list[torch.Tensor]], refs: list[list[torch.Tensor]]) -> float:
    return max(rel_error(o, r) for got, want in zip(outs, refs, strict=True) for o, r in zip(got, want, strict=True))


def float32_outputs(w: Workload) -> list[list[torch.Tensor]]:
    """Every checked output of eager PyTorch on a float32 copy of the model (int8 weights stay int8, their
    scales and every other weight, cache and input in float32), from the same cache state."""
    model = copy.deepcopy(w.model).float()
    caches = w.caches(model)
    outs = []
    with torch.no_grad():
        for cache, saved in zip(caches, w.state, strict=True):
            cache.copy_(saved)
        for inputs in w.inputs:
            outs.append([model(*(t.float() if t.is_floating_point() else t for t in inputs)).clone()])
        outs.append([c.clone() for c in caches])
    del model
    return outs


def run_mode(w: Workload, mode: str, refs: list[list[torch.Tensor]] | None, args: argparse.Namespace,
             ref32: list[list[torch.Tensor]] | None = None, bar: float | None = None
             ) -> tuple[dict[str, Any], list[list[torch.Tensor]]]:
    """One mode of one case: compile (first call), outputs of every step against eager, then the timed step."""
    setup = w.setup
    torch._dynamo.reset()
    w.reset()
    rec: dict[str, Any] = {}
    WoqRewrite.off = mode == "max_autotune_no_woq"
    with torch.no_grad(), WoqRewrite.uncached():
        fn, be = compile_mode(w.model, mode, args)
        start = time.time()
        first = fn(*w.inputs[0])
        sync(setup)
        rec["first_call_s" if be is None else "tune_s"] = round(time.time() - start, 2)
        w.reset()  # the first call wrote the first step's keys: start the checked steps from the same state
        outs = []
        for inputs in w.inputs:
            outs.append([fn(*inputs).clone()])
        sync(setup)
        outs.append([c.clone() for c in w.caches()])
        del first
        if ref32 is not None:
            rec["err_vs_float32"] = max_error(outs, ref32)
        if refs is not None:
            rec["max_rel_err"] = max_error(outs, refs)
            rec["valid"] = rec["err_vs_float32"] <= bar if bar is not None else rec["max_rel_err"] <= TOLERANCE
        step_inputs = w.inputs[-1]
        rec.update(time_step(lambda: fn(*step_inputs), setup))
        if setup.gpu:
            rec["allocated_bytes"] = torch.cuda.memory_allocated()
        if args.profile and setup.gpu:
            from fusionsearch.dynamo.profile import profile_step

            rec["profile"] = profile_step(lambda: fn(*step_inputs), steps=10).to_dict()
        if args.generate and w.case.model in DECODERS and w.case.tokens == 1:
            rec.update(generate(fn, w, args.generate))
        if be is not None:
            stats = be.stats
            rec.update({"regions": stats.regions, "searched": stats.searched, "cached": stats.cached,
                        "declined": stats.declined, "explain": stats.explain(),
                        "races": [c.to_dict() for c in stats.choices.values()],
                        "step_races": [c.to_dict() for c in stats.steps]})
        w.reset()
    rec["tokens_per_s"] = w.inputs[-1][0].numel() / (rec["median_us"] * 1e-6)
    return rec, outs


def generate(fn: Callable[..., Any], w: Workload, tokens: int) -> dict[str, Any]:
    """Greedy decoding of `tokens` tokens a sequence from the case's first step (the argmax of each step's
    logits fed to the next, the position advancing), timed whole after one untimed run: the tokens/s users
    quote, host work between steps included."""
    idx, pos = w.inputs[0]
    limit = w.cache_len - int(pos[0])
    tokens = min(tokens, limit)

    def loop() -> None:
        tok, at = idx, pos
        for _ in range(tokens):
            logits = fn(tok, at)
            tok = logits[:, -1].argmax(-1, keepdim=True)
            at = at + 1

    times = []
    for _ in range(2):
        w.reset()
        sync(w.setup)
        start = time.perf_counter()
        loop()
        sync(w.setup)
        times.append(time.perf_counter() - start)
    return {"generate_tokens": tokens, "generate_s": times[-1],
            "generate_tokens_per_s": idx.shape[0] * tokens / times[-1]}


def run_case(case: Case, setup: Setup, args: argparse.Namespace, bandwidth: float | None,
             write: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    w = Workload(case, setup)
    row: dict[str, Any] = {"case": case.name, "layers": setup.layers if case.model in DECODERS else None,
                           "weight_bytes": w.weight_bytes(), "variants": {}}
    refs, bar = None, None
    try:
        ref32 = float32_outputs(w)
    except Exception as e:  # without it, modes are held to TOLERANCE against eager
        ref32, row["float32_error"] = None, f"{type(e).__name__}: {str(e).strip()[:300]}"
    for mode in args.modes:
        if args.deadline and time.time() > args.deadline:
            row["variants"][mode] = {"error": "skipped: --deadline-s reached"}
            continue
        try:
            rec, outs = run_mode(w, mode, refs, args, ref32, bar)
            if mode == "eager":
                refs = outs
                if "err_vs_float32" in rec:
                    bar = row["float32_bar"] = 2 * rec["err_vs_float32"] + FLOAT32_SLACK
        except Exception as e:  # one mode's failure is reported, the run goes on
            rec = {"error": f"{type(e).__name__}: {str(e).strip()[:400]}"}
        if bandwidth and "median_us" in rec:
            rec["bandwidth_share"] = w.weight_bytes() / (rec["median_us"] * 1e-6) / bandwidth
        row["variants"][mode] = rec
        progress(f"{case.name} {mode}: {rec.get('median_us', rec.get('error'))}")
        write(row)
    del w
    if setup.gpu:
        torch.cuda.empty_cache()
    return row


# ---- the report ------------------------------------------------------------------------------------------
def best_pytorch(row: dict[str, Any]) -> tuple[str, float] | None:
    """The fastest valid PyTorch mode of a row (eager included) and its µs per step."""
    times = {m: v["median_us"] for m, v in row["variants"].items()
             if not m.startswith("fusionsearch") and "median_us" in v and v.get("valid", True)}
    if not times:
        return None
    mode = min(times, key=times.__getitem__)
    return mode, times[mode]


def speedup(row: dict[str, Any]) -> float | None:
    """fusionsearch's tokens/s over the fastest valid PyTorch mode's (None when either is missing or invalid)."""
    ours, best = row["variants"].get("fusionsearch", {}), best_pytorch(row)
    if best is None or "median_us" not in ours or not ours.get("valid", True):
        return None
    return best[1] / ours["median_us"]


def markdown(report: dict[str, Any]) -> str:
    modes = [m for m in MODES if any(m in r["variants"] for r in report["rows"])]
    head = ["case", *[f"{m} µs" for m in modes], "fusionsearch ÷ best", "best PyTorch mode", "tune s",
            "weights ÷ copy BW"]
    lines = [f"Device: {report.get('device', '?')}, torch {report.get('torch', '?')}, {report.get('date', '')}; "
             f"µs per step (do_bench median); tokens/s = batch × tokens ÷ step time.", "", *md_table(head)]
    for r in report["rows"]:
        cells = [r["case"]]
        for m in modes:
            v = r["variants"].get(m, {})
            cells.append("-" if m not in r["variants"] else f"{v['median_us']:.1f}" + ("" if v.get("valid", True)
                                                                                     else " (wrong)")
                         if "median_us" in v else "failed")
        s, best = speedup(r), best_pytorch(r)
        ours = r["variants"].get("fusionsearch", {})
        share = ours.get("bandwidth_share")
        cells += [f"{s:.2f}×" if s else "-", best[0] if best else "-", f"{ours['tune_s']:.0f}" if "tune_s" in ours
                  else "-", f"{share:.0%}" if share else "-"]
        lines.append(md_row(cells))
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> bool:
    """Tokens/s per mode and case (log scale), as a PNG; False without matplotlib."""
    rows = report["rows"]
    modes = [m for m in MODES if any("tokens_per_s" in r["variants"].get(m, {}) for r in rows)]
    series = {m: [r["variants"].get(m, {}).get("tokens_per_s") for r in rows] for m in modes}
    return bar_chart(path, [r["case"] for r in rows], series, "tokens / s", size=(6.0, 4.2), legend_size=7)


def tokens_table(report: dict[str, Any]) -> str:
    """Tokens/s per case and mode: from the timed step, and from the greedy generation loop where it ran."""
    modes = [m for m in MODES if any("tokens_per_s" in r["variants"].get(m, {}) for r in report["rows"])]
    lines = ["tokens/s: from the step time; after the slash, of the greedy generation loop (--generate)", "",
             *md_table(["case", *modes])]
    for r in report["rows"]:
        cells = [r["case"]]
        for m in modes:
            v = r["variants"].get(m, {})
            gen = v.get("generate_tokens_per_s")
            cells.append(f"{v['tokens_per_s']:.0f}" + (f" / {gen:.0f}" if gen else "") if "tokens_per_s" in v else "-")
        lines.append(md_row(cells))
    return "\n".join(lines)


def profiles_markdown(report: dict[str, Any]) -> str:
    """Each case's step profiles side by side (--profile): kernels, copies, memsets, busy and idle µs a step, and
    each mode's largest kernels."""
    from fusionsearch.dynamo.profile import StepProfile, side_by_side

    parts = []
    for r in report["rows"]:
        profiles = {m: StepProfile.from_dict(v["profile"]) for m, v in r["variants"].items() if "profile" in v}
        if profiles:
            parts += [f"## {r['case']}", "", side_by_side(profiles), ""]
    return "\n".join(parts)


def write_report(report: dict[str, Any], out: str) -> str:
    write_json(report, out_file(out, "e2e.json"))
    table = markdown(report) + "\n\n" + tokens_table(report)
    write_markdown(os.path.join(out, "e2e.md"), table)
    profiles = profiles_markdown(report)
    if profiles:
        write_markdown(os.path.join(out, "profiles.md"), profiles)
    plot(report, os.path.join(out, "e2e.png"))
    return table


def load_report(out: str) -> dict[str, Any]:
    path = os.path.join(out, "e2e.json")
    return read_json(path) if os.path.exists(path) else {"rows": []}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out(ap, "e2e.json, e2e.md, e2e.png (an e2e.json there is merged)", default="e2e-out")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of: {', '.join(MODES)} (eager "
                    "is always run first: the others are checked against it)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--trials", type=int, default=16, help="fusionsearch trials per distinct region")
    ap.add_argument("--inductor", default="max-autotune", help="the Inductor mode of fusionsearch's race and glue")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "fusionsearch-e2e-plans"),
                    help="fusionsearch's plan cache")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--preset", default=None, choices=("full", "tiny"), help="model sizes (default: full on "
                    "cuda, tiny on cpu)")
    ap.add_argument("--deadline-s", type=float, default=None, help="skip what would start after this many seconds")
    ap.add_argument("--profile", action="store_true", help="each mode's step under torch.profiler: kernels, copies, "
                    "memsets and idle time a step (GPU), written to profiles/ beside e2e.json")
    ap.add_argument("--generate", type=int, default=0, metavar="N", help="also time a greedy generation loop of N "
                    "tokens (decoder decode cases): generate_tokens_per_s")
    ap.add_argument("--report", metavar="DIR", help="only render DIR/e2e.json again (md and png)")
    ap.add_argument("-v", "--verbose", action="store_true", help="the fusionsearch.* loggers at INFO on stderr (each "
                    "region's and step's race, CUDA-graph capture failures)")
    args = ap.parse_args(argv)
    args.cases = comma_list(args.cases)
    modes = comma_list(args.modes)
    if unknown := [m for m in modes if m not in MODES]:
        ap.error(f"--modes: unknown {unknown}; choose from {list(MODES)}")
    args.modes = ["eager", *[m for m in modes if m != "eager"]]
    try:
        args.parsed = [Case.parse(c) for c in args.cases]
    except ValueError as e:
        ap.error(str(e))
    if args.layers < 1:
        ap.error("--layers must be at least 1")
    args.preset = args.preset or ("full" if args.device == "cuda" else "tiny")
    args.deadline = time.time() + args.deadline_s if args.deadline_s else None
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.verbose:
        import logging

        logging.basicConfig(format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("fusionsearch").setLevel(logging.INFO)
    if args.report:
        print(write_report(load_report(args.report), args.report))
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("e2e.py: no CUDA GPU here; --device cpu runs the tiny smoke version")
    setup = Setup(args.device, torch.bfloat16 if args.device == "cuda" else torch.float32, args.preset, args.layers)
    report = load_report(args.out)
    report.update({**run_facts("device", "torch", device=args.device, date="day"), "layers": args.layers,
                   "preset": args.preset, "trials": args.trials, "inductor": args.inductor})
    if setup.gpu and "bandwidth_bytes_per_s" not in report:
        from fusionsearch.measure.bench import measure_ceilings

        report.update(measure_ceilings())
    bandwidth = report.get("bandwidth_bytes_per_s")
    WoqRewrite.install()  # before the first compile of this process registers Inductor's patterns

    def write(row: dict[str, Any]) -> None:
        report["rows"] = [r for r in report["rows"] if r["case"] != row["case"]] + [row]
        report["rows"].sort(key=lambda r: CASES.index(r["case"]) if r["case"] in CASES else len(CASES))
        write_report(report, args.out)

    for case in args.parsed:
        run_case(case, setup, args, bandwidth, write)
    print(write_report(report, args.out))
    geo = [s for r in report["rows"] if (s := speedup(r))]
    if geo:
        print(f"fusionsearch over the fastest PyTorch mode: geometric mean {geomean(geo):.2f}× over {len(geo)} cases")


if __name__ == "__main__":
    main()
