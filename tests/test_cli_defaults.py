"""Each option has one default (issue 55): where the CLI offers a setting of SearchOptions (fs.tune, `search`)
or BackendOptions (fusionsearch.backend, `tune-model`), its default is the API's. The CLI's search flags and
BackendOptions' search fields read their defaults and checks from SearchOptions (when a command is parsed, so
that `fusionsearch --help` imports no torch); this compares them, changes one, and gives each a bad value."""

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


def test_a_default_changed_in_search_options_changes_the_clis_and_the_backends() -> None:
    """Issue 55 item 3: SearchOptions is each search option's one home. A SearchOptions with other defaults,
    put in place before the CLI and the backend read it, gives both the new defaults (no copy kept anywhere)."""
    import subprocess
    import sys

    code = ("import dataclasses\n"
            "import fusionsearch.search.options as o\n"
            "@dataclasses.dataclass(frozen=True)\n"
            "class Other(o.SearchOptions):\n"
            "    trials: int = 7\n"
            "    seed: int = 5\n"
            "    finalists: int = 2\n"
            "o.SearchOptions = Other\n"
            "from fusionsearch.cli import build_parser\n"
            "from fusionsearch.dynamo.backend import BackendOptions\n"
            "sub = next(a for a in build_parser()._actions if a.__class__.__name__ == '_SubParsersAction')\n"
            "s, t = sub.choices['search'], sub.choices['tune-model']\n"
            "b = BackendOptions()\n"
            "print('RESULT', s.get_default('trials'), s.get_default('seed'), s.get_default('finalists'),\n"
            "      t.get_default('trials'), t.get_default('seed'), b.trials, b.seed, b.search.trials,\n"
            "      'default 7' in s.format_help().replace(chr(10), ' ').replace('  ', ' '))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert "RESULT 7 5 2 7 5 7 5 7 True" in proc.stdout, proc.stdout + proc.stderr[-2000:]


# (SearchOptions' field, the CLI's flag, BackendOptions' name (None: not a backend field), a bad value's text)
BAD = [("seed", "--seed", "seed", "-1"), ("trials", "--trials", "trials", "0"),
       ("backend", "--backend", "search_backend", "cuda"), ("cost_model", "--cost-model", "cost_model", "fancy"),
       ("measure", "--measure", "measure", "-2"), ("timeout", "--timeout", None, "nan"),
       ("workers", "--workers", None, "0"), ("finalists", "--finalists", None, "-1")]


@pytest.mark.parametrize(("field", "flag", "name", "text"), BAD, ids=[b[1] for b in BAD])
def test_a_bad_value_gets_one_message_from_the_api_the_backend_and_the_cli(field: str, flag: str, name: str | None,
                                                                           text: str,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """One check, one sentence: fs.tune's SearchOptions, fusionsearch.backend's BackendOptions and the CLI's
    search (and tune-model) say the same, each with its own name for the option."""
    from fusionsearch.cli import main
    from fusionsearch.errors import SpecError

    value = {"seed": -1, "trials": 0, "measure": -2, "timeout": float("nan"), "workers": 0,
             "finalists": -1}.get(field, text)
    with pytest.raises(SpecError) as api:
        SearchOptions(**{field: value})
    said = str(api.value)
    assert said.startswith(f"{field} must be ") and said.endswith(f", got {value!r}"), said
    if name is not None:
        with pytest.raises(SpecError) as backend:
            BackendOptions(**{name: value})
        assert str(backend.value) == said.replace(field, name, 1)
    commands = [["search", "mm_bias_gelu", "--backend", "model"], ["tune-model", "m.py:make"]]
    for argv in commands if name in ("seed", "trials", "search_backend") else commands[:1]:
        assert main([*argv, flag, text]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said.replace(field, flag, 1) in err, (err, said)


def test_an_option_error_crosses_processes_whole() -> None:
    """A worker process that refuses an option sends the same sentence back (pickled as it was made)."""
    import pickle

    from fusionsearch.search.options import OptionError

    e = pickle.loads(pickle.dumps(OptionError("--seed", -1, "a whole number from 0 to 4294967295")))
    assert isinstance(e, OptionError) and str(e) == "--seed must be a whole number from 0 to 4294967295, got -1"


def test_fs_tune_takes_every_default_from_search_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 55 item 3: fs.tune writes no default of its own. SearchOptions with other defaults in place, a
    tune that names none of them searches with those (a name it gives wins); its signature shows
    SearchOptions' names and defaults."""
    import fusionsearch as fs
    from fusionsearch.graph.opgraph import OpGraph
    from fusionsearch.search import options, study

    @dataclasses.dataclass(frozen=True)
    class Other(SearchOptions):
        trials: int = 7
        backend: str = "model"
        seed: int = 5
        timeout: float | None = 9.0
        study_name: str | None = "other"

    asked: list[SearchOptions] = []
    monkeypatch.setattr(options, "SearchOptions", Other)
    monkeypatch.setattr(study, "SearchOptions", Other)
    monkeypatch.setattr(study, "run_study", lambda g, opts, inputs: asked.append(opts) or study.TuneResult.__new__(
        study.TuneResult))
    g = fs.workload("mm_bias_gelu", M=16, K=64, N=64)
    assert isinstance(g, OpGraph)
    fs.tune(g)
    fs.tune(g, trials=3, seed=1)
    assert [(o.trials, o.backend, o.seed, o.timeout, o.study_name) for o in asked] == [
        (7, "model", 5, 9.0, "other"), (3, "model", 1, 9.0, "other")]
    monkeypatch.undo()
    params = inspect.signature(tune).parameters
    for name in ("trials", "backend", "storage", "study_name", "seed", "timeout"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[name].default == _defaults(SearchOptions)[name], name
