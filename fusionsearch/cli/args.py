"""The CLI's argument parser and what it checks of a command's arguments before any long work (searching,
measuring, training): argparse types, a search flag read from SearchOptions, and the paths a command writes or
reads. The checks that are the API's too live in the package (search.options, codegen.outpaths, datasets)."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import Any, NoReturn

from fusionsearch.errors import SpecError


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line on stderr (exit 2) as every other user error is, and
    whose arguments that read their choices or defaults from the package (which imports torch) are added
    (`later`) only when their command is parsed or its help shown: `fusionsearch --help` and `--version` never
    import torch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._later: list[Any] = []

    def later(self, add: Any) -> None:
        """Call `add(self)` before this parser parses, shows its help or gives a default."""
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

    def get_default(self, dest: str) -> Any:
        self._complete()
        return super().get_default(dest)

    def error(self, message: str) -> NoReturn:
        # "argument --seed: --seed must be ...": a search option's sentence names its flag already
        message = re.sub(r"^argument (\S+): (?=\1 )", "", message)
        self.exit(2, f"fusionsearch: error: {message} (see {self.prog} --help)\n")


def count(n: int, noun: str) -> str:
    """'1 matmul', '3 matmuls'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def parse_shape(text: str) -> dict[str, int]:
    """--shape M=16,K=4096,N=4096 -> {'M': 16, 'K': 4096, 'N': 4096}."""
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


def parse_input_spec(text: str, positive: bool = False, default_dtype: str | None = None
                     ) -> tuple[tuple[int, ...], Any]:
    """'16x64' or '16x64:float16' -> (shape, dtype; `default_dtype` or None when not given); `positive`: no
    dimension of 0."""
    from fusionsearch.graph.registry import dtype_from_name

    dims, _, dtype = text.partition(":")
    parts = dims.lower().split("x")
    if not all(p.isdigit() and (int(p) > 0 or not positive) for p in parts):
        raise SpecError(f"--inputs {text!r}: write a shape as 16x4096, optionally with a dtype: 16x4096:bfloat16")
    dtype = dtype or default_dtype or ""
    return tuple(map(int, parts)), dtype_from_name(dtype, f"--inputs {text!r}") if dtype else None


# ---- argparse types ------------------------------------------------------------------------------------------

def whole(low: int, high: int | None = None, what: str = "a whole number") -> Any:
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


def positive(what: str) -> Any:
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


SEED = whole(0, 2**32, "a seed")  # numpy's generators take 0 .. 2**32 - 1


def _value(text: str, annotation: str) -> object:
    """A flag's text as the value SearchOptions' field of this annotation holds; the text itself where it is
    not one (the field's check then refuses it, quoting it)."""
    if annotation.startswith("int | str") and text == "auto":
        return text
    if annotation.startswith("int"):
        digits = text.removeprefix("-")
        return int(text) if digits.isascii() and digits.isdigit() else text
    if annotation.startswith("float"):
        try:
            return float(text)
        except ValueError:
            return text
    return text


def search_option(field: str, flag: str, also: Callable[[str], None] | None = None) -> Any:
    """An argparse type for the flag that sets SearchOptions' `field`: its text turned into the field's type and
    refused by SearchOptions' own check, in SearchOptions' words with the flag's name (search.options.RULES);
    `also(text)`, when given, checks more (a model file exists)."""
    def parse(text: str) -> object:
        import dataclasses

        from fusionsearch.search import options

        annotation = next(f.type for f in dataclasses.fields(options.SearchOptions) if f.name == field)
        value = _value(text, str(annotation))
        try:
            options.check_option(field, value, flag)
        except options.OptionError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if also is not None:
            also(text)
        return value
    return parse


def search_default(field: str) -> Any:
    """SearchOptions' default of `field` (read when a command's arguments are added: the module imports torch)."""
    from fusionsearch.search.options import default

    return default(field)


def model_file_exists(text: str) -> None:
    """--cost-model: a model file named is one that exists (the search reads it after minutes of setup)."""
    from fusionsearch.search.options import MODEL_FILES

    if text.endswith(MODEL_FILES) and not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"{text}: no such model file")


def dtype(text: str) -> str:
    """An argparse type: a dtype's name, as workloads take it."""
    from fusionsearch.errors import GraphError
    from fusionsearch.graph.registry import dtype_from_name

    try:
        dtype_from_name(text)
    except GraphError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("dtype: ")) from None
    return text


# ---- paths a command writes or reads, refused before any long work ------------------------------------------

def check_writable_place(path: str, flag: str) -> None:
    """Refuse a path in a place no file can be created in (shared with the API's export: codegen/outpaths.py)."""
    from fusionsearch.codegen.outpaths import check_writable_place as check

    check(path, flag)


def check_out_dir(path: str, flag: str = "--out") -> None:
    """A directory to be written whole, refused as the API's export refuses it (codegen/outpaths.py)."""
    from fusionsearch.codegen.outpaths import check_out_dir as check

    check(path, flag)


def check_out_file(path: str, flag: str = "--out", new: bool = False) -> None:
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
    check_writable_place(path, flag)


def check_cache_dir(path: str) -> None:
    """The plan cache: an existing directory or a new one, in a place that can be written."""
    if os.path.islink(path) and not os.path.exists(path):
        raise SpecError(f"--cache {path!r} is a symbolic link to nothing ({os.readlink(path)!r}); name a directory")
    if os.path.exists(path) and not os.path.isdir(path):
        raise SpecError(f"--cache {path!r} is a file, not a directory")
    check_writable_place(os.path.join(path, "plan") if os.path.isdir(path) else path, "--cache")
