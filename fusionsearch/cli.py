"""The `fusionsearch` command: parsing and printing only; the work is done by the package's stages."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fusionsearch.errors import FusionSearchError


def _cmd_list(args: argparse.Namespace) -> int:
    from fusionsearch.datasets.workloads import WORKLOADS

    width = max(len(n) for n in WORKLOADS)
    for name, w in WORKLOADS.items():
        shape = " ".join(f"{k}={v}" for k, v in w.defaults.items())
        print(f"{name:<{width}}  {shape:<26}  {w.summary}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fusionsearch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list the built-in workloads with their default shapes")
    p.set_defaults(func=_cmd_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI: exit 0 on success, 2 on a user error (one line, no traceback), 1 on an internal failure."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except FusionSearchError as e:
        print(f"fusionsearch: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fusionsearch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
