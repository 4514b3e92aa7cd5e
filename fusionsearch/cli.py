"""The `fusionsearch` command: parsing and printing only; the work is done by the package's stages.

Logging: the package logs through the `fusionsearch` logger hierarchy (`fusionsearch.search`: the study, its
trials and workers; `fusionsearch.measure`: measurement workers; `fusionsearch.backend`: the torch.compile
backend). `-v` (INFO) / `-vv` (DEBUG) or `--log-level LEVEL` put a stderr handler on `fusionsearch` alone;
without them Python's default shows warnings only."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from fusionsearch import settings
from fusionsearch.errors import FusionSearchError, SpecError

if TYPE_CHECKING:  # the package's modules import torch: each command imports what it uses, when it runs
    from fusionsearch.graph.opgraph import OpGraph

DEFAULT_WORKLOAD = "w8_dequant_mm"


def _cmd_list(args: argparse.Namespace) -> int:
    from fusionsearch.datasets.workloads import WORKLOADS

    width = max(len(n) for n in WORKLOADS)
    for name, w in WORKLOADS.items():
        shape = " ".join(f"{k}={v}" for k, v in w.defaults.items())
        print(f"{name:<{width}}  {shape:<26}  {w.summary}")
    return 0


def _count(n: int, noun: str) -> str:
    """'1 matmul', '3 matmuls'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _parse_shape(text: str) -> dict[str, int]:
    shape: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key.isidentifier() or not (value.isascii() and value.isdigit()):
            raise SpecError(f"--shape {text!r}: write it as M=16,K=4096,N=4096 (positive integers)")
        if key in shape:
            raise SpecError(f"--shape {text!r} gives {key} twice; give each dimension once")
        shape[key] = int(value)
    return shape


# ---- checks of what a command is given, made before any long work (searching, measuring, training) -------------

def _whole(low: int, high: int | None = None, what: str = "a whole number") -> Any:
    """An argparse type: an integer from `low` (to `high`, exclusive, when given)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} is needed, got {text!r}") from None
        if value < low or (high is not None and value >= high):
            bound = f"from {low} to {high - 1}" if high is not None else f"of at least {low}"
            raise argparse.ArgumentTypeError(f"{what} {bound} is needed, got {text!r}")
        return value
    return parse


def _positive(what: str) -> Any:
    """An argparse type: a finite number above zero (not NaN)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{what} must be a positive number, got {text!r}")
        return value
    return parse


SEED = _whole(0, 2**32, "a seed")  # numpy's generators take 0 .. 2**32 - 1


def _one_of(name: str) -> Any:
    """An argparse type: one of search.options' tuple `name` (read when a command is parsed, not to build the
    parser: that module imports torch)."""
    def parse(text: str) -> str:
        from fusionsearch.search import options

        choices = getattr(options, name)
        if text not in choices:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(choices)}")
        return text
    return parse


def _dtype(text: str) -> str:
    """An argparse type: a dtype's name, as workloads take it."""
    from fusionsearch.errors import GraphError
    from fusionsearch.graph.registry import dtype_from_name

    try:
        dtype_from_name(text)
    except GraphError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("dtype: ")) from None
    return text


def _study_name(text: str) -> str:
    """An argparse type: a study's name (not blank)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"a study name is needed, got {text!r}")
    return text


def _cost_model(text: str) -> str:
    """An argparse type: auto, analytic, learned or a model file's name."""
    from fusionsearch.search.options import MODEL_FILES

    if text not in ("auto", "analytic", "learned") and not text.endswith(MODEL_FILES):
        raise argparse.ArgumentTypeError(f"use auto, analytic, learned or a model file ({', '.join(MODEL_FILES)}), "
                                         f"got {text!r}")
    if text.endswith(MODEL_FILES) and not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"{text}: no such model file")
    return text


def _check_writable_place(path: str, flag: str) -> None:
    """Refuse a path in a place no file can be created in (shared with the API's export: codegen/outpaths.py)."""
    from fusionsearch.codegen.outpaths import check_writable_place

    check_writable_place(path, flag)


def _check_out_dir(path: str, flag: str = "--out") -> None:
    """A directory to be written whole, refused as the API's export refuses it (codegen/outpaths.py)."""
    from fusionsearch.codegen.outpaths import check_out_dir

    check_out_dir(path, flag)


def _check_out_file(path: str, flag: str = "--out", new: bool = False) -> None:
    """A file to be written (a new one when `new`, else a new or a regular file to replace or append to)."""
    if os.path.islink(path) and not os.path.exists(path):
        raise SpecError(f"{flag} {path!r} is a symbolic link to nothing ({os.readlink(path)!r}); name a file")
    if os.path.isdir(path):
        raise SpecError(f"{flag} {path!r} is a directory; name a file")
    if os.path.exists(path):
        if new:
            raise SpecError(f"{flag} {path!r} exists; name a new file")
        if not os.path.isfile(path):
            raise SpecError(f"{flag} {path!r} is not a regular file")
    _check_writable_place(path, flag)


def _check_dataset(path: str) -> None:
    """A measurements dataset to read: an existing file that is one (refused before anything is computed)."""
    from fusionsearch.datasets.measurements import check_appendable
    from fusionsearch.errors import CostModelError

    if not os.path.exists(path):
        raise SpecError(f"{path}: no such dataset file")
    if not os.path.isfile(path):
        raise SpecError(f"{path}: not a dataset file ({'a directory' if os.path.isdir(path) else 'not a file'})")
    try:
        check_appendable(path)
    except CostModelError as e:
        why = str(e).partition("(")[2].partition(")")[0] or "not one"
        raise SpecError(f"{path} is not a measurements dataset ({why}): give a file `fusionsearch costmodel "
                        "collect` wrote") from None


def _load_target(target: str | None, shape: str, dtype: str) -> OpGraph:
    """A built-in workload by name or a JSON spec file; the default workload when none is named."""
    from fusionsearch.datasets.workloads import WORKLOADS, workload
    from fusionsearch.graph.spec import load_graph

    if target is None:
        target = DEFAULT_WORKLOAD
    if target.endswith(".json") or os.path.sep in target:
        if shape:
            raise SpecError("--shape applies to built-in workloads; a spec file carries its own shapes")
        return load_graph(target)
    if target not in WORKLOADS:
        raise SpecError(f"{target!r} is neither a built-in workload ({', '.join(WORKLOADS)}) nor a .json spec file")
    return workload(target, dtype=dtype, **_parse_shape(shape))


def _graph_name(target: str | None, shape: str, dtype: str) -> str:
    """The graph as the user named it, recorded in the study: the workload with its shape and dtype, or the
    spec file."""
    target = target or DEFAULT_WORKLOAD
    if target.endswith(".json") or os.path.sep in target:
        return os.path.basename(target)
    return " ".join(filter(None, (target, shape.replace(" ", ""), dtype)))


def _cmd_search(args: argparse.Namespace) -> int:
    from fusionsearch.costmodel.hardware import Hardware
    from fusionsearch.search.facts import hardware_words, search_facts
    from fusionsearch.search.study import SearchOptions, possible_plans, resolve_backend, run_study, search_space
    from fusionsearch.search.workers import worker_count

    workers: int | str = args.workers
    if workers != "auto":
        if not (str(workers).isascii() and str(workers).isdigit()) or int(workers) < 1:
            raise SpecError(f"--workers takes a positive number or 'auto', got {workers!r}")
        workers = int(workers)
    if args.out:
        _check_out_dir(args.out)
    settings.interpret_without_gpu()  # before a spec's extern ops import Triton
    g = _load_target(args.target, args.shape, args.dtype)
    graph_name = _graph_name(args.target, args.shape, args.dtype)
    opts = SearchOptions(trials=args.trials, backend=args.backend, sampler=args.sampler, storage=args.storage,
                         study_name=args.study, workers=workers, seed=args.seed, timeout=args.timeout,
                         bytes_rule=None if args.no_bytes_rule else args.bytes_rule, progress=not args.quiet,
                         cost_model=args.cost_model, refit_every=args.refit_every,
                         compile_ranked=args.compile_ranked, finalists=args.finalists,
                         library=not args.no_library, trial_timeout_s=args.trial_timeout, graph_name=graph_name,
                         **({} if args.measure is None else {"measure": args.measure}))  # None: SearchOptions
    backend = resolve_backend(opts.backend)
    what = args.target or DEFAULT_WORKLOAD
    how = {"gpu": "measured on the GPU", "model": "ranked by the cost model alone",
           "interpret": "no GPU here: each candidate validated in Triton's CPU interpreter on a shrunk copy of "
                        "the graph, ranked by the cost model"}[backend]
    single = possible_plans(search_space(g, opts, Hardware.detect())) == 1
    workers = 1 if single else worker_count(opts.workers, backend)
    in_parallel = f" in {workers} worker processes" if workers > 1 else ""
    trials = "1 possible plan: 1 trial" if single else _count(opts.trials, "trial")
    print(f"searching {what} ({_count(len(g), 'node')}, {_count(len(g.nodes_of_kind('template')), 'matmul')}), {trials}"
          f"{in_parallel}, backend {backend}: {how}", flush=True, file=sys.stderr if args.json else sys.stdout)
    res = run_study(g, opts)
    if args.out:  # written before anything is printed, so a closed stdout (`| head`) cannot lose it
        _write_out(res, args.out)
    if args.json:
        print(json.dumps(search_facts(res, graph_name, args.out), indent=1, default=str))
        return 0
    print(res.explain())
    print(f"best: {res.best_us:.1f} us, {hardware_words(res.backend, res.hardware.name)}")
    if args.out:
        print(f"wrote {args.out}/ ({', '.join(sorted(os.listdir(args.out)))})")
    return 0


def _write_out(res: Any, out: str) -> None:
    """Export the result into `out` whole or not at all: written beside it, then renamed into place. `out` was
    checked before the search; should it have changed since, the result is kept where it was written and named."""
    parent = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(parent, exist_ok=True)  # --out a/b/new: make a/b
        tmp = _new_dir(parent)
    except OSError as e:
        raise SpecError(f"--out {out!r} cannot be written ({e.strerror}); nothing was written") from None
    try:
        res.export(tmp)
        with open(os.path.join(tmp, "result.json"), "w") as f:
            json.dump(res.to_dict(), f, indent=1, default=str)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        if os.path.isdir(out) and not os.path.islink(out):
            os.rmdir(out)
        os.replace(tmp, out)
    except OSError as e:
        raise SpecError(f"--out {out!r} changed during the search and cannot be replaced ({e.strerror}); the "
                        f"result is in {tmp}") from None


def _new_dir(parent: str) -> str:
    """A new directory of a unique name in `parent`, with the permissions the umask gives any new directory
    (tempfile.mkdtemp's are 0700: an --out renamed from one would be private to its owner)."""
    import secrets

    while True:
        path = os.path.join(parent, f".fusionsearch-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue


def _cmd_explain(args: argparse.Namespace) -> int:
    from fusionsearch.costmodel.hardware import Hardware
    from fusionsearch.graph.spec import load_graph
    from fusionsearch.search.facts import plan_facts
    from fusionsearch.search.replay import read_plan

    path = os.path.join(args.plan, "plan.json") if os.path.isdir(args.plan) else args.plan
    if not os.path.isfile(path):
        raise SpecError(f"{args.plan}: no plan here; give a search's --out directory or its plan.json")
    graph_path = args.graph or os.path.join(os.path.dirname(os.path.abspath(path)), "graph.json")
    plan = read_plan(path, load_graph(graph_path))
    hw = Hardware.detect()
    facts = plan_facts(plan, hw, _learned_kernel_times(plan, hw))
    facts["search"] = _searched(os.path.join(os.path.dirname(os.path.abspath(path)), "result.json"))
    if args.json:
        print(json.dumps(facts, indent=1))
        return 0
    print(plan.describe())
    for k in facts["kernels"]:
        also = f", learned model {k['learned_us']:.1f} us" if "learned_us" in k else ""
        print(f"kernel {k['index']}: {k['bytes_read'] / 1e6:.2f} MB read, {k['bytes_written'] / 1e6:.2f} MB written, "
              f"{k['flops'] / 1e9:.2f} GFLOP; analytic model {k['analytic_us']:.1f} us{also}")
    also = f", learned ({hw.name}) model {facts['learned_us']:.1f} us" if facts["learned_us"] is not None else ""
    print(f"plan: analytic model {facts['analytic_us']:.1f} us{also}")
    print(f"figures {facts['hardware_words']}")
    searched = facts["search"]
    if searched:
        print(f"the search: {searched['best_us']:.1f} us ({searched['how']})")
    return 0


def _learned_kernel_times(plan: Any, hw: Any) -> list[float] | None:
    """Each kernel's time (µs) by the shipped learned model when it matches this GPU, else None."""
    from fusionsearch.costmodel.learned import load_default
    from fusionsearch.costmodel.pricing import plans_matrix

    model = load_default()
    if model is None:
        return None
    X, _ = plans_matrix([plan], hw)
    return [float(t) for t in model.predict(X)]


def _searched(result_path: str) -> dict[str, Any] | None:
    """What the search that wrote this plan recorded of it (result.json beside it); None without."""
    from fusionsearch.search.facts import how_words

    try:
        with open(result_path) as f:
            result = json.load(f)
        best, backend, model = float(result["best_us"]), str(result["backend"]), str(result["cost_model"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    how = "measured on the GPU" if backend == "gpu" else f"{how_words(backend, model)}, backend {backend}"
    return {"best_us": best, "backend": backend, "cost_model": model, "how": how}


def _cmd_studies(args: argparse.Namespace) -> int:
    from fusionsearch.search.studies import format_studies, list_studies
    from fusionsearch.search.study import redact

    summaries = list_studies(args.storage)
    print(format_studies(summaries) if summaries else f"no studies in {redact(args.storage)}")
    return 0


def _parse_input_spec(text: str) -> tuple[tuple[int, ...], Any]:
    """'16x64' or '16x64:float16' -> (shape, dtype or None)."""
    from fusionsearch.graph.registry import dtype_from_name

    dims, _, dtype = text.partition(":")
    parts = dims.lower().split("x")
    if not all(p.isdigit() for p in parts):
        raise SpecError(f"--inputs {text!r}: write a shape as 16x4096, optionally with a dtype: 16x4096:bfloat16")
    return tuple(map(int, parts)), dtype_from_name(dtype, f"--inputs {text!r}") if dtype else None


def _cmd_run(args: argparse.Namespace) -> int:
    from fusionsearch.errors import MeasureError
    from fusionsearch.search.progress import Steps
    from fusionsearch.search.replay import check_inputs, load_saved, replay, resolve

    specs = [_parse_input_spec(t) for t in args.inputs or ()]
    backend = resolve(args.backend)
    settings.interpret_without_gpu()  # before the graph's extern ops import Triton
    graph, plan = load_saved(args.plan_dir)
    if args.inputs:
        check_inputs(graph, specs)
    with Steps(f"run {args.plan_dir}") as steps:  # a full-size plan takes a minute or more in the interpreter
        r = replay(graph, plan, backend, seed=args.seed, say=steps.say)
    if not r.ok:
        raise MeasureError(f"{args.plan_dir}: the plan does not validate on this machine ({r.device}): rel error "
                           f"{r.rel_err:.3g} (tolerance {r.tolerance:g}): {r.reason}")
    kernels = f"{len(plan.kernels)} kernel{'s' if len(plan.kernels) != 1 else ''}"
    print(f"{args.plan_dir}: {kernels} for graph {graph.signature_hash()} ({len(graph)} nodes)")
    print(f"ok: rel error {r.rel_err:.3g} against the float64 reference (tolerance {r.tolerance:g}), on {r.device}")
    if r.median_us is None:
        print("time: none measured on a CPU (the interpreter's speed says nothing of a GPU's); run it where a GPU "
              "is to time it")
    else:
        print(f"time: {r.median_us:.1f} us median (p20 {r.p20_us:.1f}, p80 {r.p80_us:.1f}) on {r.device}")
    return 0


# ---- costmodel collect / train / evaluate: the learned cost model ----------------------------------

def _cmd_costmodel_collect(args: argparse.Namespace) -> int:
    from fusionsearch.datasets.measurements import check_appendable
    from fusionsearch.search.collect import CollectOptions, collect

    _check_out_file(args.out)
    check_appendable(args.out)

    counts = collect(args.out, CollectOptions(graphs=args.graphs, plans_per_graph=args.plans_per_graph,
                                              seed=args.seed, progress=not args.quiet, family=args.family))
    print(f"appended to {args.out}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "nothing new")
    return 0


def _cmd_costmodel_compile(args: argparse.Namespace) -> int:
    from fusionsearch.search.collect import add_resources

    _check_dataset(args.data)
    _check_out_file(args.out, new=True)
    counts = add_resources(args.data, args.out)
    print(f"wrote {args.out}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return 0


def _family_argument(p: argparse.ArgumentParser) -> None:
    from fusionsearch.datasets.random_graphs import FAMILIES, families_of
    from fusionsearch.errors import GraphError

    def parse(text: str) -> str:
        try:
            return ",".join(families_of(text))
        except GraphError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    p.add_argument("--family", type=parse, default="mixed",
                   help="random graph family: dense and batched matmuls (default), mixture-of-experts FFNs, "
                   "1-16-row matmuls on int8/int4/16-bit weights, routed MoE blocks, RMSNorm/RoPE projections, "
                   f"attention score chains ({', '.join(FAMILIES)}); several comma-separated, or 'all', take turns")


def _fp32_dot_argument(p: argparse.ArgumentParser) -> None:
    from fusionsearch.plan import FP32_DOT, FP32_DOTS

    p.add_argument("--fp32-dot", choices=tuple(FP32_DOTS), default=FP32_DOT,
                   help=f"the rows of fp32 matmuls measured with this dot precision (default {FP32_DOT}, the code "
                        "generator's; rows that do not say were measured with ieee)")


def _cmd_costmodel_train(args: argparse.Namespace) -> int:
    from fusionsearch.costmodel.train import format_figures, train

    for path in args.data:
        _check_dataset(path)
    _check_out_file(args.out)
    hyper = {"learning_rate": args.learning_rate, "max_iter": args.max_iter, "n_bags": args.bags,
             "width_split": not args.no_width_split, "target": args.target}
    result = train(args.data, args.out, folds=args.folds, first_graphs=args.graphs, fp32_dot=args.fp32_dot, **hyper)
    cv = result["cv"]
    print(f"cross-validation, {cv['folds']} folds holding out whole graphs (plan rankings within each graph):")
    print(format_figures(cv))
    print(f"wrote {args.out} (trained on all {result['rows']} kernel rows of {result['graphs']} graphs)")
    return 0


def _cmd_costmodel_evaluate(args: argparse.Namespace) -> int:
    from fusionsearch.costmodel.learned import load
    from fusionsearch.costmodel.train import evaluate, format_figures

    _check_dataset(args.data)
    figures = evaluate(load(args.model), args.data, fp32_dot=args.fp32_dot)
    print(format_figures(figures))
    print("(graphs the model was trained on score optimistically; `costmodel train` prints held-out figures)")
    return 0

# ---- end costmodel train / evaluate ----------------------------------------------------------------


def _load_factory(target: str) -> Any:
    """MODULE:FACTORY or path/to/file.py:FACTORY -> the factory callable."""
    import importlib
    import importlib.util

    where, sep, name = target.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise SpecError(f"{target!r}: name the model as MODULE:FACTORY or path/to/file.py:FACTORY")
    try:
        if where.endswith(".py"):
            if not os.path.isfile(where):
                raise SpecError(f"{where}: no such file")
            spec = importlib.util.spec_from_file_location("fusionsearch_user_model", where)
            assert spec and spec.loader
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())  # MODULE as the user sees it from here
            module = importlib.import_module(where)
    except SpecError:
        raise
    except Exception as e:
        raise SpecError(f"{where}: cannot be imported ({type(e).__name__}: {e})") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise SpecError(f"{where} has no callable {name!r}")
    return factory


def _parse_input(text: str, device: str) -> Any:
    """'16x64' or '16x64:float16' -> a random tensor of that shape and dtype (default float32)."""
    import torch

    from fusionsearch.graph.registry import dtype_from_name

    dims, _, dtype = text.partition(":")
    parts = dims.lower().split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise SpecError(f"--inputs {text!r}: write a shape as 16x4096, optionally with a dtype: 16x4096:bfloat16")
    dt = dtype_from_name(dtype or "float32", f"--inputs {text!r}")
    return torch.randn(*map(int, parts), generator=torch.Generator().manual_seed(0)).to(device=device, dtype=dt)


def _cmd_tune_model(args: argparse.Namespace) -> int:
    import time

    import torch

    from fusionsearch.dynamo.backend import tune_model
    from fusionsearch.dynamo.plan_cache import default_cache_dir
    from fusionsearch.search.study import BACKENDS

    if args.backend not in BACKENDS:
        raise SpecError(f"--backend {args.backend!r} is not one of {', '.join(BACKENDS)}")
    if args.cache:
        _check_cache_dir(args.cache)
    settings.interpret_without_gpu()  # before the user's module imports Triton
    device = "cuda" if torch.cuda.is_available() else "cpu"
    given = [_parse_input(t, device) for t in args.inputs] if args.inputs else None
    factory = _load_factory(args.target)
    try:
        made = factory()
    except Exception as e:
        raise SpecError(f"{args.target}() raised {type(e).__name__}: {e}") from None
    model, example = (made[0], list(made[1])) if isinstance(made, tuple) and len(made) == 2 else (made, None)
    if not isinstance(model, torch.nn.Module):
        raise SpecError(f"{args.target} returned a {type(model).__name__}, not a torch.nn.Module (or a pair "
                        "(module, example inputs))")
    example = given if given is not None else example
    if example is None:
        raise SpecError(f"give --inputs (shapes), or make {args.target} return (module, example inputs)")
    inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in example]
    model = model.to(device).eval()
    if device == "cpu":
        print("no GPU here: regions are validated in Triton's CPU interpreter and ranked by the cost model",
              file=sys.stderr)
    start = time.time()
    stats = tune_model(model, *inputs, progress=not args.quiet, trials=args.trials, search_backend=args.backend,
                       cache=args.cache, seed=args.seed)
    cache = args.cache or default_cache_dir()
    print(f"tuned {_count(stats.regions, 'matmul region')}: {stats.searched} searched, {stats.cached} loaded from "
          f"the plan cache (identical regions share one plan) in {time.time() - start:.1f} s; plans in {cache}")
    if stats.choices:
        print(stats.explain())
    print(f"use them: torch.compile(model, backend=fusionsearch.backend(cache={cache!r}, trials={args.trials}))")
    return 0


def _check_cache_dir(path: str) -> None:
    """The plan cache: an existing directory or a new one, in a place that can be written."""
    if os.path.islink(path) and not os.path.exists(path):
        raise SpecError(f"--cache {path!r} is a symbolic link to nothing ({os.readlink(path)!r}); name a directory")
    if os.path.exists(path) and not os.path.isdir(path):
        raise SpecError(f"--cache {path!r} is a file, not a directory")
    _check_writable_place(os.path.join(path, "plan") if os.path.isdir(path) else path, "--cache")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line on stderr (exit 2) as every other user error is, and
    whose arguments that read their choices from the package (which imports torch) are added (`later`) only
    when their command is parsed or its help shown: `fusionsearch --help` and `--version` never import torch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._later: list[Any] = []

    def later(self, add: Any) -> None:
        """Call `add(self)` before this parser parses or shows its help."""
        self._later.append(add)

    def _complete(self) -> None:
        while self._later:
            self._later.pop(0)(self)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._complete()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._complete()
        return super().format_help()

    def format_usage(self) -> str:
        self._complete()
        return super().format_usage()

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"fusionsearch: error: {message} (see {self.prog} --help)\n")


DESCRIPTION = """Find how to fuse the pointwise work around matmuls into Triton kernels: search a built-in workload or
a JSON graph spec for its fastest fusion plan, explain and run a saved plan, tune a PyTorch model's matmul regions
for torch.compile, and train the learned cost model.

Logging: -v (INFO) / -vv (DEBUG) or --log-level LEVEL show the fusionsearch.* loggers on stderr
(fusionsearch.search: the study, its trials and workers; fusionsearch.measure: measurement workers;
fusionsearch.backend: the torch.compile backend); without them only warnings are shown."""


def build_parser() -> argparse.ArgumentParser:
    from fusionsearch.version import __version__

    parser = _Parser(prog="fusionsearch", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fusionsearch {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log the fusionsearch.* loggers on stderr: -v INFO, -vv DEBUG")
    parser.add_argument("--log-level", default=None, metavar="LEVEL",
                        help=f"level of the fusionsearch.* loggers on stderr ({', '.join(LEVELS)}); wins over -v")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list the built-in workloads with their default shapes")
    p.set_defaults(func=_cmd_list)
    p = sub.add_parser("search", help="search the best fusion plan for a workload or a JSON graph spec")
    p.add_argument("target", nargs="?", help=f"built-in workload name or SPEC.json (default: {DEFAULT_WORKLOAD})")
    p.add_argument("--shape", default="", help="shape parameters of a workload, e.g. M=16,K=4096,N=4096")
    p.add_argument("--dtype", type=_dtype, default="bfloat16", help="dtype of a workload (bfloat16, float16, float32)")
    p.add_argument("--trials", type=_whole(1, what="a number of trials"), default=32,
                   help="total trials of the study (default 32)")
    p.add_argument("--backend", type=_one_of("BACKENDS"), default="auto",
                   help="auto (gpu when present), gpu, interpret (CPU), model")
    p.add_argument("--sampler", type=_one_of("SAMPLERS"), default="auto",
                   help="auto (ranked with a learned cost model, else tpe), ranked (measure in the cost model's "
                        "order), tpe, brute (exhaustive), random")
    p.add_argument("--storage", default=None, help="Optuna storage URL (sqlite:///f.db, postgresql://..., journal:f)")
    p.add_argument("--study", type=_study_name, default=None, help="study name, to resume or to share between workers")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--timeout", type=_positive("the time limit (seconds)"), default=None,
                   help="stop after this many seconds")
    p.add_argument("--bytes-rule", type=_positive("the prologue bytes factor"), default=1.1,
                   help="prologue bytes factor (default 1.1)")
    p.add_argument("--no-bytes-rule", action="store_true", help="let measurement decide every prologue")
    p.add_argument("--out", default=None, help="write plan.json, the exported kernels and report.md here")
    p.add_argument("--cost-model", type=_cost_model, default="auto",
                   help="auto (learned model when one matches this GPU), analytic, learned, or a model file "
                        "(.npz, .skops)")
    p.add_argument("--refit-every", type=_whole(0, what="a number of measured plans"), default=4,
                   help="on the GPU, correct the learned model on this search's measured kernels every N measured "
                        "plans (default 4; 0 never)")
    p.add_argument("--measure", type=_whole(0, what="a number of plans"), default=None,
                   help="on the GPU with a learned model ranking the plans, run at most N trials, each measuring "
                        "one plan; the model ranks the rest (default: SearchOptions.measure, 8; 0: --trials)")
    p.add_argument("--compile-ranked", type=_whole(0, what="a number of plans"), default=0,
                   help="with a learned model, compile the N plans predicted fastest for the GPU (on the CPU) and "
                        "rank them again with their registers, spills and shared memory (default 0: the blind "
                        "ranking, the better one on the reference workloads; 2 x --trials is a usual N)")
    p.add_argument("--finalists", type=_whole(0, what="a number of plans"), default=3,
                   help="on the GPU, time the N fastest measured plans again side by side at the end and keep the "
                        "fastest by that (default 3; 0 never)")
    p.add_argument("--no-library", action="store_true",
                   help="Triton templates only: never run a matmul in PyTorch's own matmul (cuBLAS), which the "
                        "search otherwise may where nothing is fused into it")
    p.add_argument("--trial-timeout", type=_positive("a trial's time limit (seconds)"), default=300.0,
                   help="on the GPU, seconds a plan may take to validate and time before its trial fails and its "
                        "measurement worker is replaced (default 300)")
    p.add_argument("--workers", default="1",
                   help="worker processes on one study: 'auto' starts one per visible GPU, each pinned to its GPU "
                        "(default 1); with --storage, the study is shared through it, else through a temporary "
                        "SQLite file")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on stdout (best plan, time, how and where, trials, files written) "
                        "instead of the text; progress and warnings stay on stderr")
    p.set_defaults(func=_cmd_search)
    p = sub.add_parser("explain", help="explain a saved plan (a search's --out directory or its plan.json)")
    p.add_argument("plan")
    p.add_argument("--graph", default=None, help="the graph spec (default: graph.json beside the plan)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of the text")
    p.set_defaults(func=_cmd_explain)
    p = sub.add_parser("studies", help="list the studies in an Optuna storage: graph, trials, best time")
    p.add_argument("--storage", required=True,
                   help="the storage a search used: sqlite:///f.db, postgresql://..., journal:f (never created)")
    p.set_defaults(func=_cmd_studies)
    p = sub.add_parser("run", help="validate a saved plan on this machine and time it on a GPU (a search's --out)")
    p.add_argument("plan_dir", help="a search's --out directory (plan.json and graph.json)")
    p.add_argument("--inputs", nargs="+", action="extend", default=None, metavar="SHAPE:DTYPE",
                   help="the inputs you expect, e.g. 16x64:float32 (one per graph input, in order): refused unless "
                        "they are the graph's; values are drawn at random, indices in range")
    p.add_argument("--backend", default="auto",
                   help="gpu (validate and time), interpret (validate in Triton's CPU interpreter, no time), "
                        "auto (gpu when present)")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the random inputs")
    p.set_defaults(func=_cmd_run)
    p = sub.add_parser("tune-model", help="tune every matmul region of a PyTorch model into the plan cache")
    p.add_argument("target", help="MODULE:FACTORY or path/to/file.py:FACTORY, a callable returning an nn.Module, "
                                  "or a pair (module, example inputs) for models whose inputs are not random floats "
                                  "(token ids, positions)")
    p.add_argument("--inputs", action="append", default=None,
                   help="an example input's shape and dtype, e.g. 16x4096:bfloat16 (repeat for each input)")
    p.add_argument("--trials", type=_whole(1), default=32, help="trials per distinct matmul region (default 32)")
    p.add_argument("--backend", default="auto", help="auto (gpu when present), gpu, interpret (CPU), model")
    p.add_argument("--cache", default=None, help="plan cache directory (default $FUSIONSEARCH_CACHE_DIR/plans)")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_tune_model)
    # ---- costmodel: collect / train / evaluate ----
    cm = sub.add_parser("costmodel", help="collect kernel timings, train and evaluate the learned cost model")
    cm_sub = cm.add_subparsers(dest="costmodel_command", required=True)
    p = cm_sub.add_parser("collect", help="measure sampled plans of random graphs on the GPU into a dataset")
    p.add_argument("--graphs", type=_whole(1), default=100, help="random graphs to measure (default 100)")
    p.add_argument("--plans-per-graph", type=_whole(1), default=12, help="plans sampled per graph (default 12)")
    p.add_argument("--seed", type=SEED, default=0, help="first random graph's seed")
    p.later(_family_argument)
    p.add_argument("--out", required=True, help="dataset file (appended; a killed run resumes where it stopped)")
    p.add_argument("--quiet", action="store_true", help="no per-graph progress lines")
    p.set_defaults(func=_cmd_costmodel_collect)
    p = cm_sub.add_parser("compile", help="add each template kernel's registers, spills and shared memory "
                                         "(compiled for sm_90 on the CPU) to a dataset measured without them")
    p.add_argument("data", help="measurements dataset")
    p.add_argument("--out", required=True, help="new dataset file to write")
    p.set_defaults(func=_cmd_costmodel_compile)
    p = cm_sub.add_parser("train", help="train a model on a measurements dataset; prints held-out figures")
    p.add_argument("data", nargs="+", help="measurements datasets (written by `costmodel collect`; several, one "
                                           "per GPU, are pooled into one model)")
    p.add_argument("--out", required=True, help="model file to write (.npz; a name ending .skops: a legacy skops file)")
    p.add_argument("--folds", type=_whole(2), default=5,
                   help="cross-validation folds, whole graphs held out (default 5)")
    p.add_argument("--learning-rate", type=_positive("a learning rate"), default=0.1,
                   help="gradient boosting learning rate (default 0.1)")
    p.add_argument("--max-iter", type=_whole(1), default=300, help="boosting iterations (default 300)")
    p.add_argument("--bags", type=_whole(1), default=5, help="models averaged, each on 80%% of the graphs (default 5)")
    p.add_argument("--graphs", type=_whole(1), default=None,
                   help="train on the first N graphs of each dataset only, in collection order (default: all)")
    p.add_argument("--target", choices=("kernel", "graph", "balanced"), default="kernel",
                   help="what the trees fit: each kernel's log ratio to the roofline (kernel, default: the shipped "
                        "model's), that less its graph's mean (graph), or the kernel ratio with every graph weighing "
                        "the same (balanced)")
    p.add_argument("--no-width-split", action="store_true",
                   help="one set of models for every kernel (default: graphs with 16-bit matmul operands get "
                        "their own, which price all but fp32 matmul templates)")
    p.later(_fp32_dot_argument)
    p.set_defaults(func=_cmd_costmodel_train)
    p = cm_sub.add_parser("evaluate", help="rank each graph's plans with a model and compare to the measurements")
    p.add_argument("model", help="model file written by `costmodel train`")
    p.add_argument("data", help="measurements dataset")
    p.later(_fp32_dot_argument)
    p.set_defaults(func=_cmd_costmodel_evaluate)
    # ---- end costmodel ----
    return parser


LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_handler(verbose: int, level: str | None) -> logging.Handler | None:
    """A stderr handler on the `fusionsearch` logger (never the root: an embedding program's logging is its own)
    at `level`, or INFO / DEBUG for -v / -vv; None when neither is given."""
    if level is not None:
        if level.upper() not in LEVELS:
            raise SpecError(f"--log-level {level!r}: use one of {', '.join(LEVELS)}")
        chosen = getattr(logging, level.upper())
    elif verbose:
        chosen = logging.INFO if verbose == 1 else logging.DEBUG
    else:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
    handler.setLevel(chosen)
    logger = logging.getLogger("fusionsearch")
    logger.addHandler(handler)
    logger.setLevel(chosen)
    return handler


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI: exit 0 on success, 2 on a user error (one line, no traceback), 1 on an internal failure."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)  # a usage error: one line (_Parser.error); --help, --version: printed
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    logger = logging.getLogger("fusionsearch")
    level, handler = logger.level, None
    try:
        handler = _log_handler(args.verbose, args.log_level)
        return int(args.func(args))
    except FusionSearchError as e:
        print(f"fusionsearch: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fusionsearch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (`| head`): stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes it
        return 1
    finally:
        if handler is not None:  # main() called again in one process (tests, notebooks) starts clean
            logger.removeHandler(handler)
            logger.setLevel(level)


if __name__ == "__main__":
    raise SystemExit(main())
