"""Issue 24, bad input: every subcommand refuses a bad value with one line on stderr and exit 2, before any long
work (searching, measuring, training, importing a model: each stood in for by a function that fails the test),
and writes nothing (the test folder is the same, file for file, before and after)."""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from fusionsearch.cli import main

SEARCH = ["search", "mm_bias_gelu", "--shape", "M=16,K=64,N=64", "--backend", "model", "--trials", "2", "--quiet"]
FACTORY = "import pathlib\npathlib.Path(__file__).with_name('imported').write_text('')\n" \
          "def make():\n    raise AssertionError('the model was built')\n"

# argv ({t}: the test folder), then the words the error line must hold
CASES: list[tuple[str, tuple[str, ...]]] = [
    # search: numbers
    ("S --seed -1", ("--seed", "4294967295")),
    ("S --seed 4294967296", ("--seed", "4294967295")),
    ("S --seed abc", ("--seed", "abc")),
    ("S --trials 0", ("--trials", "at least 1")),
    ("S --trials -5", ("--trials", "at least 1")),
    ("S --trials 1e3", ("--trials", "1e3")),
    ("S --timeout 0", ("--timeout", "positive")),
    ("S --timeout -1", ("--timeout", "positive")),
    ("S --timeout nan", ("--timeout", "nan")),
    ("S --timeout inf", ("--timeout", "inf")),
    ("S --timeout soon", ("--timeout", "soon")),
    ("S --bytes-rule 0", ("--bytes-rule", "positive")),
    ("S --bytes-rule -1.1", ("--bytes-rule", "positive")),
    ("S --bytes-rule nan", ("--bytes-rule", "nan")),
    ("S --trial-timeout nan", ("--trial-timeout", "positive")),
    ("S --trial-timeout inf", ("--trial-timeout", "positive")),
    ("S --refit-every -1", ("--refit-every",)),
    ("S --finalists -2", ("--finalists",)),
    ("S --compile-ranked -1", ("--compile-ranked",)),
    ("S --workers 0", ("--workers",)),
    ("S --workers ３", ("--workers",)),
    # search: words
    ("S --shape M=16,M=32", ("--shape", "M twice")),
    ("S --shape M=²", ("--shape", "positive integers")),
    ("S --shape =16", ("--shape",)),
    ("S --backend cuda", ("--backend", "cuda")),
    ("S --sampler best", ("--sampler", "best")),
    ("S --dtype float8", ("float8",)),
    ("S --study ", ("--study",)),
    ("S --cost-model {t}/missing.npz", ("missing.npz", "no such model file")),
    ("S --cost-model fancy", ("--cost-model", "fancy")),
    ("search {t}/adir", ("adir",)),
    ("search {t}/bad.json", ("bad.json", "UTF-8")),
    # search: --out
    ("S --out {t}/afile", ("--out", "is a file")),
    ("S --out {t}/full", ("--out", "not empty")),
    ("S --out {t}/dangling", ("--out", "symbolic link")),
    ("S --out {t}/afile/sub", ("--out", "not a directory")),
    ("S --out /proc/fusionsearch-out", ("--out", "cannot be written", "no file can be created in '/proc'")),
    # search: storages
    ("S --storage journal:{t}/adir", ("journal", "is a directory")),
    ("S --storage journal:{t}/no/such/j.log", ("journal", "no such directory")),
    ("S --storage journal:{t}/bad.bin", ("journal", "not an Optuna journal")),
    ("S --storage journal:{t}/afile.log", ("journal", "not an Optuna journal")),
    ("S --storage journal:", ("journal", "names no file")),
    ("S --storage sqlite:///{t}/bad.bin", ("sqlite", "cannot be opened")),
    ("S --storage somewhere", ("not a URL",)),
    # explain
    ("explain {t}/missing", ("missing", "no plan here")),
    ("explain {t}/adir", ("adir", "no plan here")),
    ("explain {t}/saved/plan.json --graph {t}/adir", ("adir", "directory")),
    ("explain {t}/saved/plan.json --graph {t}/bad.json", ("bad.json", "UTF-8")),
    ("explain {t}/bad.json --graph {t}/saved/graph.json", ("bad.json", "UTF-8")),
    ("explain {t}/dangling", ("dangling", "no plan here")),
    # run
    ("run {t}/saved --seed -1", ("--seed", "0 to 4294967295")),
    ("run {t}/saved --seed 99999999999999999999", ("--seed", "0 to 4294967295")),
    ("run {t}/saved --backend model", ("--backend", "model")),
    ("run {t}/saved --inputs 16x", ("--inputs",)),
    ("run {t}/saved --inputs 16x64:float9", ("float9",)),
    ("run {t}/afile", ("afile", "no such directory")),
    ("run {t}/adir", ("adir", "plan.json")),
    # studies
    ("studies --storage journal:{t}/adir", ("is a directory",)),
    ("studies --storage journal:{t}/missing.log", ("no such file",)),
    ("studies --storage journal:{t}/bad.bin", ("not an Optuna journal",)),
    ("studies --storage sqlite:///{t}/bad.bin", ("cannot be read",)),
    ("studies --storage nope", ("not a URL",)),
    ("studies", ("--storage", "required")),
    # tune-model: refused before the model's module is imported
    ("tune-model {t}/model.py:make --trials 0", ("--trials", "at least 1")),
    ("tune-model {t}/model.py:make --seed -3", ("--seed",)),
    ("tune-model {t}/model.py:make --backend fast", ("--backend", "fast")),
    ("tune-model {t}/model.py:make --cache {t}/afile", ("--cache", "is a file")),
    ("tune-model {t}/model.py:make --cache {t}/dangling", ("--cache", "symbolic link")),
    ("tune-model {t}/model.py:make --cache /proc/fusionsearch-cache", ("--cache", "cannot be written")),
    ("tune-model {t}/model.py:make --inputs 0x4", ("--inputs",)),
    ("tune-model {t}/model.py", ("MODULE:FACTORY",)),
    # costmodel
    ("costmodel collect --out {t}/adir", ("--out", "directory")),
    ("costmodel collect --out {t}/dangling", ("--out", "symbolic link")),
    ("costmodel collect --out {t}/bad.bin", ("bad.bin", "not a measurements dataset")),
    ("costmodel collect --out /proc/fusionsearch.gz", ("--out", "cannot be written")),
    ("costmodel collect --out {t}/c.gz --graphs 0", ("--graphs", "at least 1")),
    ("costmodel collect --out {t}/c.gz --plans-per-graph -1", ("--plans-per-graph",)),
    ("costmodel collect --out {t}/c.gz --seed -1", ("--seed",)),
    ("costmodel collect --out {t}/c.gz --family moe,bogus", ("--family", "'moe,bogus'", "norm_rope")),
    ("costmodel collect", ("--out", "required")),
    ("costmodel compile {t}/missing.gz --out {t}/new.gz", ("missing.gz", "no such dataset")),
    ("costmodel compile {t}/adir --out {t}/new.gz", ("adir", "directory")),
    ("costmodel compile {t}/bad.bin --out {t}/new.gz", ("bad.bin", "not a measurements dataset")),
    ("costmodel compile {t}/data.gz --out {t}/afile", ("--out", "exists")),
    ("costmodel compile {t}/data.gz --out {t}/dangling", ("--out", "symbolic link")),
    ("costmodel train {t}/bad.bin --out {t}/m.npz", ("bad.bin", "not a measurements dataset")),
    ("costmodel train {t}/data.gz --out {t}/adir", ("--out", "directory")),
    ("costmodel train {t}/data.gz --out {t}/afile/m.npz", ("--out", "not a directory")),
    ("costmodel train {t}/data.gz --out /proc/m.npz", ("--out", "cannot be written")),
    ("costmodel train {t}/data.gz --out {t}/m.npz --folds 1", ("--folds", "at least 2")),
    ("costmodel train {t}/data.gz --out {t}/m.npz --learning-rate nan", ("--learning-rate", "positive")),
    ("costmodel train {t}/data.gz --out {t}/m.npz --learning-rate 0", ("--learning-rate", "positive")),
    ("costmodel train {t}/data.gz --out {t}/m.npz --max-iter 0", ("--max-iter",)),
    ("costmodel train {t}/data.gz --out {t}/m.npz --bags -1", ("--bags",)),
    ("costmodel train {t}/data.gz --out {t}/m.npz --graphs 0", ("--graphs",)),
    ("costmodel evaluate {t}/missing.npz {t}/data.gz", ("missing.npz", "no such model file")),
    ("costmodel evaluate {t}/bad.bin {t}/data.gz", ("bad.bin",)),
    ("costmodel evaluate {t}/afile.log {t}/bad.bin", ("bad.bin", "not a measurements dataset")),
    ("costmodel evaluate {t}/afile.log {t}/adir", ("adir", "directory")),
    # the command line itself
    ("list extra", ("unrecognized arguments",)),
    ("frobnicate", ("invalid choice",)),
    ("--log-level loud list", ("--log-level",)),
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("saved") / "o"
    assert main([*SEARCH, "--out", str(out)]) == 0
    return out


@pytest.fixture
def folder(tmp_path: Path, saved: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of things commands are wrongly given, and every long step of a command failing the test."""
    import gzip
    import shutil

    (tmp_path / "afile").write_text("x")
    (tmp_path / "afile.log").write_text('{"not": "a journal"}\n')
    (tmp_path / "adir").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_text("mine")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "bad.bin").write_bytes(b"\xff\xfe\x00 not text")
    (tmp_path / "bad.json").write_bytes(b'{"nodes": "\xff"}')
    (tmp_path / "model.py").write_text(FACTORY)
    with gzip.open(tmp_path / "data.gz", "wt") as f:
        f.write('{"graph_id": "g0"}\n')
    shutil.copytree(saved, tmp_path / "saved")

    def long_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the long work started before the input was checked")

    for module, name in (("search.session", "run_session"), ("search.study", "run_workers"),
                         ("search.replay", "replay"),
                         ("costmodel.train", "train"), ("costmodel.train", "evaluate"),
                         ("search.collect", "collect"), ("search.collect", "add_resources"),
                         ("dynamo.backend", "tune_model")):
        monkeypatch.setattr(importlib.import_module(f"fusionsearch.{module}"), name, long_work)
    return tmp_path


def _snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` with what it is: a file's content hash, a link's target, 'dir'."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                seen[rel] = f"-> {os.readlink(path)}"
            elif path.is_dir():
                seen[rel] = "dir"
            else:
                seen[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def _argv(template: str, root: Path) -> list[str]:
    argv = template.replace("{t}", str(root)).split(" ")
    return SEARCH + argv[1:] if argv[0] == "S" else argv


@pytest.mark.parametrize(("template", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2_before_any_work(template: str, words: tuple[str, ...], folder: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    before = _snapshot(folder)
    rc = main(_argv(template, folder))
    captured = capsys.readouterr()
    err = captured.err
    assert rc == 2, (rc, err, captured.out)
    assert err.count("\n") == 1 and err.startswith("fusionsearch: error: "), err
    for w in words:
        assert w in err, (w, err)
    assert _snapshot(folder) == before  # nothing written, moved or left behind (a temporary folder, a lock file)
    assert not Path("/proc/fusionsearch-out").exists()


# the options SearchOptions holds (a storage's, --out's and --shape's errors name what was given, not a field)
SEARCH_CASES = [c for c in CASES if c[0].startswith("S --") and not c[0].startswith(("S --out", "S --shape",
                                                                                     "S --storage"))]


@pytest.mark.parametrize(("template", "words"), SEARCH_CASES, ids=[c[0] for c in SEARCH_CASES])
def test_a_search_option_error_names_the_flag_not_the_python_field(template: str, words: tuple[str, ...],
                                                                   folder: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 53 item 8: `--bytes-rule nan` said "bytes_rule must be a positive factor (None lifts the rule)",
    SearchOptions' words; the CLI's line names the flag it was given and none of the API's fields or None."""
    import dataclasses

    from fusionsearch.search.options import SearchOptions

    flag = template.split(" ")[1]
    assert main(_argv(template, folder)) == 2
    err = capsys.readouterr().err
    assert flag in err, err
    fields = [f.name for f in dataclasses.fields(SearchOptions) if "_" in f.name]
    assert not [f for f in fields if f in err] and "None" not in err, err


def test_every_subcommand_has_bad_input_cases() -> None:
    from fusionsearch.cli import build_parser

    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    covered = {c[0].split(" ")[0] for c in CASES} | {"search"}
    assert commands - {"list"} <= covered, commands - covered
    for sub in ("collect", "compile", "train", "evaluate"):
        assert any(c[0].startswith(f"costmodel {sub}") for c in CASES), sub


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_still_exit_0(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 0
    assert capsys.readouterr().out


def test_an_out_directory_that_changed_during_the_search_keeps_the_result(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """--out is checked before the search; should someone fill it meanwhile, the result is kept beside it and
    named, never lost, and what they put there stays."""
    import fusionsearch.search.study as study

    out = tmp_path / "o"
    run_study: Callable[..., object] = study.run_study

    def fill_out_then_search(*args: object, **kwargs: object) -> object:
        out.mkdir()
        (out / "theirs").write_text("keep")
        return run_study(*args, **kwargs)

    monkeypatch.setattr(study, "run_study", fill_out_then_search)
    assert main([*SEARCH, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "changed during the search" in err, err
    kept = Path(err.strip().rsplit(" ", 1)[1])
    assert (kept / "plan.json").is_file() and kept.parent == tmp_path
    assert (out / "theirs").read_text() == "keep"
