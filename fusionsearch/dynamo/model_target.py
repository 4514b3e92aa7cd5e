"""The model `fusionsearch tune-model` tunes, from what its command line names: a factory (MODULE:FACTORY or
path/to/file.py:FACTORY) returning an nn.Module, or a pair (module, example inputs), and example inputs made
from shapes and dtypes when given. Importing the user's module may import Triton, so Triton's interpreter is
chosen first on a machine without a GPU (settings.interpret_without_gpu)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fusionsearch import settings
from fusionsearch.errors import SpecError


@dataclass(frozen=True)
class ModelTarget:
    """A model ready to tune: in eval mode on `device` ('cuda' with a GPU, else 'cpu'), with its example inputs
    there too."""

    model: torch.nn.Module
    inputs: list[Any]
    device: str


def load_factory(target: str) -> Callable[..., Any]:
    """MODULE:FACTORY or path/to/file.py:FACTORY -> the factory callable; SpecError naming what is wrong."""
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


def load_model(target: str, input_specs: Sequence[tuple[tuple[int, ...], torch.dtype]] | None = None
               ) -> ModelTarget:
    """The model `target` names, with random example inputs of `input_specs` (shape, dtype) when given (each
    drawn from seed 0), else the inputs its factory returns beside it; SpecError when it gives neither."""
    settings.interpret_without_gpu()  # before the user's module imports Triton
    device = "cuda" if torch.cuda.is_available() else "cpu"
    given = None if not input_specs else [
        torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(device=device, dtype=dtype)
        for shape, dtype in input_specs]
    factory = load_factory(target)
    try:
        made = factory()
    except Exception as e:
        raise SpecError(f"{target}() raised {type(e).__name__}: {e}") from None
    model, example = (made[0], list(made[1])) if isinstance(made, tuple) and len(made) == 2 else (made, None)
    if not isinstance(model, torch.nn.Module):
        raise SpecError(f"{target} returned a {type(model).__name__}, not a torch.nn.Module (or a pair "
                        "(module, example inputs))")
    example = given if given is not None else example
    if example is None:
        raise SpecError(f"give --inputs (shapes), or make {target} return (module, example inputs)")
    inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in example]
    return ModelTarget(model.to(device).eval(), inputs, device)
