"""`fusionsearch list` and `fusionsearch search`: the built-in workloads, and the search of one for its fastest
fusion plan. Every flag that sets a search option takes its default and its check from SearchOptions
(search/options.py), the one home of each option."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Any

from fusionsearch.cli.args import (
    Parser,
    check_out_dir,
    count,
    dtype,
    model_file_exists,
    parse_shape,
    search_default,
    search_option,
)
from fusionsearch.errors import SpecError

# Each flag that sets a SearchOptions field: flag -> (field, help; {default} is SearchOptions' default).
OPTION_FLAGS: dict[str, tuple[str, str | None]] = {
    "--trials": ("trials", "total trials of the study (default {default})"),
    "--backend": ("backend", "auto (gpu when present), gpu, interpret (CPU), model"),
    "--sampler": ("sampler", "auto (ranked with a learned cost model, else tpe), ranked (measure in the cost "
                             "model's order), tpe, brute (exhaustive), random"),
    "--storage": ("storage", "Optuna storage URL (sqlite:///f.db, postgresql://..., journal:f)"),
    "--study": ("study_name", "study name, to resume or to share between workers"),
    "--seed": ("seed", None),
    "--timeout": ("timeout", "stop after this many seconds"),
    "--bytes-rule": ("bytes_rule", "prologue bytes factor (default {default})"),
}
MORE_FLAGS: dict[str, tuple[str, str | None]] = {  # after --no-bytes-rule and --out, as --help lists them
    "--cost-model": ("cost_model", "auto (learned model when one matches this GPU), analytic, learned, or a model "
                                   "file (.npz, .skops)"),
    "--refit-every": ("refit_every", "on the GPU, correct the learned model on this search's measured kernels "
                                     "every N measured plans (default {default}; 0 never)"),
    "--measure": ("measure", "on the GPU with a learned model ranking the plans, run at most N trials, each "
                             "measuring one plan; the model ranks the rest (default {default}; 0: --trials)"),
    "--compile-ranked": ("compile_ranked", "with a learned model, compile the N plans predicted fastest for the "
                                           "GPU (on the CPU) and rank them again with their registers, spills and "
                                           "shared memory (default {default}: the blind ranking, the better one "
                                           "on the reference workloads; 2 x --trials is a usual N)"),
    "--finalists": ("finalists", "on the GPU, time the N fastest measured plans again side by side at the end "
                                 "and keep the fastest by that (default {default}; 0 never)"),
}
LAST_FLAGS: dict[str, tuple[str, str | None]] = {
    "--trial-timeout": ("trial_timeout_s", "on the GPU, seconds a plan may take to validate and time before its "
                                           "trial fails and its measurement worker is replaced (default "
                                           "{default:g})"),
    "--workers": ("workers", "worker processes on one study: 'auto' starts one per visible GPU, each pinned to "
                             "its GPU (default {default}); with --storage, the study is shared through it, else "
                             "through a temporary SQLite file"),
}
SEARCH_FLAGS = {**OPTION_FLAGS, **MORE_FLAGS, **LAST_FLAGS}


def add_option_flags(p: argparse.ArgumentParser, flags: dict[str, tuple[str, str | None]]) -> None:
    """Add each flag of `flags`, its default, type and help's default read from SearchOptions."""
    for flag, (field, words) in flags.items():
        value = search_default(field)
        also = model_file_exists if field == "cost_model" else None
        p.add_argument(flag, type=search_option(field, flag, also), default=value,
                       help=None if words is None else words.format(default=value))


def cmd_list(args: argparse.Namespace) -> int:
    from fusionsearch.datasets.workloads import WORKLOADS

    width = max(len(n) for n in WORKLOADS)
    for name, w in WORKLOADS.items():
        shape = " ".join(f"{k}={v}" for k, v in w.defaults.items())
        print(f"{name:<{width}}  {shape:<26}  {w.summary}")
    return 0


def _search_arguments(p: argparse.ArgumentParser) -> None:
    from fusionsearch.search.target import DEFAULT_WORKLOAD

    p.add_argument("target", nargs="?", help=f"built-in workload name or SPEC.json (default: {DEFAULT_WORKLOAD})")
    p.add_argument("--shape", default="", help="shape parameters of a workload, e.g. M=16,K=4096,N=4096")
    p.add_argument("--dtype", type=dtype, default="bfloat16", help="dtype of a workload (bfloat16, float16, float32)")
    add_option_flags(p, OPTION_FLAGS)
    p.add_argument("--no-bytes-rule", action="store_true", help="let measurement decide every prologue")
    p.add_argument("--out", default=None, help="write plan.json, the exported kernels and report.md here")
    add_option_flags(p, MORE_FLAGS)
    p.add_argument("--no-library", action="store_true",
                   help="Triton templates only: never run a matmul in PyTorch's own matmul (cuBLAS), which the "
                        "search otherwise may where nothing is fused into it")
    add_option_flags(p, LAST_FLAGS)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on stdout (best plan, time, how and where, trials, files written) "
                        "instead of the text; progress and warnings stay on stderr")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("list", help="list the built-in workloads with their default shapes")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("search", help="search the best fusion plan for a workload or a JSON graph spec")
    assert isinstance(p, Parser)
    p.later(_search_arguments)  # SearchOptions' defaults: read when `search` is parsed (the module imports torch)
    p.set_defaults(func=cmd_search)


def _options(args: argparse.Namespace, graph_name: str) -> Any:
    """The SearchOptions the flags set (each flag's value checked by SearchOptions when it was parsed)."""
    from fusionsearch.search.options import SearchOptions

    values = {field: getattr(args, flag[2:].replace("-", "_")) for flag, (field, _) in SEARCH_FLAGS.items()}
    if args.no_bytes_rule:
        values["bytes_rule"] = None
    return SearchOptions(**values, progress=not args.quiet, library=not args.no_library, graph_name=graph_name)


def cmd_search(args: argparse.Namespace) -> int:
    from fusionsearch.search.facts import hardware_words, search_facts, search_setup
    from fusionsearch.search.study import run_study
    from fusionsearch.search.target import DEFAULT_WORKLOAD, load_target, target_name

    if args.out:
        check_out_dir(args.out)
    graph_name = target_name(args.target, args.shape, args.dtype)
    opts = _options(args, graph_name)
    g = load_target(args.target, parse_shape(args.shape), args.dtype)
    setup = search_setup(g, opts)
    what = args.target or DEFAULT_WORKLOAD
    how = {"gpu": "measured on the GPU", "model": "ranked by the cost model alone",
           "interpret": "no GPU here: each candidate validated in Triton's CPU interpreter on a shrunk copy of "
                        "the graph, ranked by the cost model"}[setup["backend"]]
    in_parallel = f" in {setup['workers']} worker processes" if setup["workers"] > 1 else ""
    trials = "1 possible plan: 1 trial" if setup["single"] else count(opts.trials, "trial")
    print(f"searching {what} ({count(len(g), 'node')}, {count(len(g.nodes_of_kind('template')), 'matmul')}), "
          f"{trials}{in_parallel}, backend {setup['backend']}: {how}", flush=True,
          file=sys.stderr if args.json else sys.stdout)
    res = run_study(g, opts)
    if args.out:  # written before anything is printed, so a closed stdout (`| head`) cannot lose it
        write_out(res, args.out)
    if args.json:
        print(json.dumps(search_facts(res, graph_name, args.out), indent=1, default=str))
        return 0
    print(res.explain())
    print(f"best: {res.best_us:.1f} us, {hardware_words(res.backend, res.hardware.name)}")
    if args.out:
        print(f"wrote {args.out}/ ({', '.join(sorted(os.listdir(args.out)))})")
    return 0


def write_out(res: Any, out: str) -> None:
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
