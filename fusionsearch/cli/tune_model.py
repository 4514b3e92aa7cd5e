"""`fusionsearch tune-model`: tune every matmul region of a PyTorch model into the plan cache that
`torch.compile(model, backend=fusionsearch.backend(cache=...))` reads. Its search flags (--trials, --backend,
--seed) take their defaults and checks from SearchOptions, as BackendOptions' fields do."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from fusionsearch.cli.args import Parser, check_cache_dir, count, parse_input_spec, search_default, search_option


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="MODULE:FACTORY or path/to/file.py:FACTORY, a callable returning an nn.Module, "
                                  "or a pair (module, example inputs) for models whose inputs are not random floats "
                                  "(token ids, positions)")
    p.add_argument("--inputs", action="append", default=None,
                   help="an example input's shape and dtype, e.g. 16x4096:bfloat16 (repeat for each input)")
    trials = search_default("trials")
    p.add_argument("--trials", type=search_option("trials", "--trials"), default=trials,
                   help=f"trials per distinct matmul region (default {trials})")
    p.add_argument("--backend", type=search_option("backend", "--backend"), default=search_default("backend"),
                   help="auto (gpu when present), gpu, interpret (CPU), model")
    p.add_argument("--cache", default=None, help="plan cache directory (default $FUSIONSEARCH_CACHE_DIR/plans)")
    p.add_argument("--seed", type=search_option("seed", "--seed"), default=search_default("seed"))
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("tune-model", help="tune every matmul region of a PyTorch model into the plan cache")
    assert isinstance(p, Parser)
    p.later(_arguments)  # SearchOptions' defaults: read when tune-model is parsed (the module imports torch)
    p.set_defaults(func=cmd_tune_model)


def cmd_tune_model(args: argparse.Namespace) -> int:
    from fusionsearch.dynamo.backend import tune_model
    from fusionsearch.dynamo.model_target import load_model
    from fusionsearch.dynamo.plan_cache import default_cache_dir

    if args.cache:
        check_cache_dir(args.cache)
    specs = [parse_input_spec(t, positive=True, default_dtype="float32") for t in args.inputs or ()]
    target = load_model(args.target, specs)
    if target.device == "cpu":
        print("no GPU here: regions are validated in Triton's CPU interpreter and ranked by the cost model",
              file=sys.stderr)
    start = time.time()
    stats = tune_model(target.model, *target.inputs, progress=not args.quiet, trials=args.trials,
                       search_backend=args.backend, cache=args.cache, seed=args.seed)
    cache = args.cache or default_cache_dir()
    print(f"tuned {count(stats.regions, 'matmul region')}: {stats.searched} searched, {stats.cached} loaded from "
          f"the plan cache (identical regions share one plan) in {time.time() - start:.1f} s; plans in {cache}")
    if stats.choices:
        print(stats.explain())
    print(f"use them: torch.compile(model, backend=fusionsearch.backend(cache={cache!r}, trials={args.trials}))")
    return 0
