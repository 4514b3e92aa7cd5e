"""Each option has one default (issue 55): where the CLI offers a setting of SearchOptions (fs.tune, `search`)
or BackendOptions (fusionsearch.backend, `tune-model`), its default is the API's. The CLI keeps its defaults as
literals (so that `--help` answers without importing torch); this compares them."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from fusionsearch.cli import build_parser
from fusionsearch.dynamo.backend import BackendOptions
from fusionsearch.search.options import SearchOptions
from fusionsearch.search.study import tune

# the CLI's dest -> the API's field
SEARCH = {"trials": "trials", "backend": "backend", "sampler": "sampler", "storage": "storage",
          "study": "study_name", "seed": "seed", "timeout": "timeout", "bytes_rule": "bytes_rule",
          "cost_model": "cost_model", "refit_every": "refit_every", "compile_ranked": "compile_ranked",
          "finalists": "finalists", "trial_timeout": "trial_timeout_s", "workers": "workers", "measure": "measure"}
TUNE_MODEL = {"trials": "trials", "backend": "search_backend"}


def _subparser(name: str):  # type: ignore[no-untyped-def]
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[name]


def _defaults(cls: type) -> dict[str, object]:
    return {f.name: f.default for f in dataclasses.fields(cls)}


@pytest.mark.parametrize(("command", "api", "names"), [("search", SearchOptions, SEARCH),
                                                      ("tune-model", BackendOptions, TUNE_MODEL)])
def test_the_clis_defaults_are_the_apis(command: str, api: type, names: dict[str, str]) -> None:
    p, want = _subparser(command), _defaults(api)
    for dest, field in names.items():
        got = p.get_default(dest)
        if got is None and want[field] is not None:
            assert f"{api.__name__}.{field}" in next(a.help for a in p._actions if a.dest == dest), dest
            continue  # None: the CLI passes nothing and the API's default holds (its help names it)
        assert str(got) == str(want[field]), f"{command} --{dest.replace('_', '-')}: {got!r} != {want[field]!r}"


def test_fs_tune_and_the_backend_default_to_the_same_trials_as_the_cli() -> None:
    assert inspect.signature(tune).parameters["trials"].default == SearchOptions.trials == BackendOptions.trials \
        == _subparser("search").get_default("trials") == _subparser("tune-model").get_default("trials")
