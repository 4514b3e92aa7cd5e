"""The `fusionsearch` command: parsing and printing only; the work is done by the package's stages. One module
per command group (search.py: list, search; saved.py: explain, run, studies; tune_model.py; costmodel.py),
args.py the parser and the checks of arguments shared by them.

Logging: the package logs through the `fusionsearch` logger hierarchy (`fusionsearch.search`: the study, its
trials and workers; `fusionsearch.measure`: measurement workers; `fusionsearch.backend`: the torch.compile
backend). `-v` (INFO) / `-vv` (DEBUG) or `--log-level LEVEL` put a stderr handler on `fusionsearch` alone;
without them Python's default shows warnings only."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from fusionsearch.cli import costmodel, saved, search, tune_model
from fusionsearch.cli.args import Parser
from fusionsearch.cli.args import check_out_dir as _check_out_dir  # noqa: F401  (tests/search/test_tune_api.py)
from fusionsearch.errors import FusionSearchError, SpecError

__all__ = ["build_parser", "main"]

DESCRIPTION = """Find how to fuse the pointwise work around matmuls into Triton kernels: search a built-in workload or
a JSON graph spec for its fastest fusion plan, explain and run a saved plan, tune a PyTorch model's matmul regions
for torch.compile, and train the learned cost model.

Logging: -v (INFO) / -vv (DEBUG) or --log-level LEVEL show the fusionsearch.* loggers on stderr
(fusionsearch.search: the study, its trials and workers; fusionsearch.measure: measurement workers;
fusionsearch.backend: the torch.compile backend); without them only warnings are shown."""

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def build_parser() -> argparse.ArgumentParser:
    """The top parser and one subparser per command, added by each command group's module."""
    from fusionsearch.version import __version__

    parser = Parser(prog="fusionsearch", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fusionsearch {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log the fusionsearch.* loggers on stderr: -v INFO, -vv DEBUG")
    parser.add_argument("--log-level", default=None, metavar="LEVEL",
                        help=f"level of the fusionsearch.* loggers on stderr ({', '.join(LEVELS)}); wins over -v")
    sub = parser.add_subparsers(dest="command", required=True)
    search.add_parsers(sub)
    saved.add_parsers(sub)
    tune_model.add_parsers(sub)
    costmodel.add_parsers(sub)
    return parser


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
        args = parser.parse_args(argv)  # a usage error: one line (Parser.error); --help, --version: printed
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
