"""`fusionsearch costmodel collect | compile | train | evaluate`: the learned cost model's data and training."""

from __future__ import annotations

import argparse
from typing import Any

from fusionsearch.cli.args import SEED, check_out_file, positive, whole


def add_parsers(sub: Any) -> None:
    cm = sub.add_parser("costmodel", help="collect kernel timings, train and evaluate the learned cost model")
    cm_sub = cm.add_subparsers(dest="costmodel_command", required=True)
    p = cm_sub.add_parser("collect", help="measure sampled plans of random graphs on the GPU into a dataset")
    p.add_argument("--graphs", type=whole(1), default=100, help="random graphs to measure (default 100)")
    p.add_argument("--plans-per-graph", type=whole(1), default=12, help="plans sampled per graph (default 12)")
    p.add_argument("--seed", type=SEED, default=0, help="first random graph's seed")
    p.later(_family_argument)
    p.add_argument("--out", required=True, help="dataset file (appended; a killed run resumes where it stopped)")
    p.add_argument("--quiet", action="store_true", help="no per-graph progress lines")
    p.set_defaults(func=cmd_collect)
    p = cm_sub.add_parser("compile", help="add each template kernel's registers, spills and shared memory "
                                         "(compiled for sm_90 on the CPU) to a dataset measured without them")
    p.add_argument("data", help="measurements dataset")
    p.add_argument("--out", required=True, help="new dataset file to write")
    p.set_defaults(func=cmd_compile)
    p = cm_sub.add_parser("train", help="train a model on a measurements dataset; prints held-out figures")
    p.add_argument("data", nargs="+", help="measurements datasets (written by `costmodel collect`; several, one "
                                           "per GPU, are pooled into one model)")
    p.add_argument("--out", required=True, help="model file to write (.npz; a name ending .skops: a legacy skops file)")
    p.add_argument("--folds", type=whole(2), default=5,
                   help="cross-validation folds, whole graphs held out (default 5)")
    p.add_argument("--learning-rate", type=positive("a learning rate"), default=0.1,
                   help="gradient boosting learning rate (default 0.1)")
    p.add_argument("--max-iter", type=whole(1), default=300, help="boosting iterations (default 300)")
    p.add_argument("--bags", type=whole(1), default=5, help="models averaged, each on 80%% of the graphs (default 5)")
    p.add_argument("--graphs", type=whole(1), default=None,
                   help="train on the first N graphs of each dataset only, in collection order (default: all)")
    p.add_argument("--target", choices=("kernel", "graph", "balanced"), default="kernel",
                   help="what the trees fit: each kernel's log ratio to the roofline (kernel, default: the shipped "
                        "model's), that less its graph's mean (graph), or the kernel ratio with every graph weighing "
                        "the same (balanced)")
    p.add_argument("--no-width-split", action="store_true",
                   help="one set of models for every kernel (default: graphs with 16-bit matmul operands get "
                        "their own, which price all but fp32 matmul templates)")
    p.later(_fp32_dot_argument)
    p.set_defaults(func=cmd_train)
    p = cm_sub.add_parser("evaluate", help="rank each graph's plans with a model and compare to the measurements")
    p.add_argument("model", help="model file written by `costmodel train`")
    p.add_argument("data", help="measurements dataset")
    p.later(_fp32_dot_argument)
    p.set_defaults(func=cmd_evaluate)


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


def cmd_collect(args: argparse.Namespace) -> int:
    from fusionsearch.datasets.measurements import check_appendable
    from fusionsearch.search.collect import CollectOptions, collect

    check_out_file(args.out)
    check_appendable(args.out)

    counts = collect(args.out, CollectOptions(graphs=args.graphs, plans_per_graph=args.plans_per_graph,
                                              seed=args.seed, progress=not args.quiet, family=args.family))
    print(f"appended to {args.out}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "nothing new")
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    from fusionsearch.datasets.measurements import check_dataset
    from fusionsearch.search.collect import add_resources

    check_dataset(args.data)
    check_out_file(args.out, new=True)
    counts = add_resources(args.data, args.out)
    print(f"wrote {args.out}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from fusionsearch.costmodel.train import format_figures, train
    from fusionsearch.datasets.measurements import check_dataset

    for path in args.data:
        check_dataset(path)
    check_out_file(args.out)
    hyper = {"learning_rate": args.learning_rate, "max_iter": args.max_iter, "n_bags": args.bags,
             "width_split": not args.no_width_split, "target": args.target}
    result = train(args.data, args.out, folds=args.folds, first_graphs=args.graphs, fp32_dot=args.fp32_dot, **hyper)
    cv = result["cv"]
    print(f"cross-validation, {cv['folds']} folds holding out whole graphs (plan rankings within each graph):")
    print(format_figures(cv))
    print(f"wrote {args.out} (trained on all {result['rows']} kernel rows of {result['graphs']} graphs)")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from fusionsearch.costmodel.learned import load
    from fusionsearch.costmodel.train import evaluate, format_figures
    from fusionsearch.datasets.measurements import check_dataset

    check_dataset(args.data)
    figures = evaluate(load(args.model), args.data, fp32_dot=args.fp32_dot)
    print(format_figures(figures))
    print("(graphs the model was trained on score optimistically; `costmodel train` prints held-out figures)")
    return 0
