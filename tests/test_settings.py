"""fusionsearch.settings: every environment variable read in one place, at the call (tests set them at run
time), and the interpreter switch puts the flag back as it found it."""

from __future__ import annotations

import os
import sys

import pytest

from fusionsearch import settings
from fusionsearch.codegen.runtime import cache_dir, cache_root


def test_defaults_without_any_variable() -> None:
    s = settings.current({})
    assert s.cache_dir == os.path.join(os.path.expanduser("~"), ".cache", "fusionsearch")
    assert s.fast_launch and not s.interpret and s.visible_devices == ()


def test_each_variable_is_read() -> None:
    s = settings.current({"FUSIONSEARCH_CACHE_DIR": "/c", "FUSIONSEARCH_FAST_LAUNCH": "0", "TRITON_INTERPRET": "0",
                          "CUDA_VISIBLE_DEVICES": "2, GPU-abc,"})
    assert s == settings.Settings("/c", False, False, ("2", "GPU-abc"))
    assert not settings.current({"TRITON_INTERPRET": "1"}).fast_launch  # the interpreter launches through Triton


def test_the_cache_follows_the_environment_at_the_call(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSIONSEARCH_CACHE_DIR", str(tmp_path))
    assert cache_root() == str(tmp_path) and cache_dir() == os.path.join(str(tmp_path), "kernels")


@pytest.mark.parametrize("before", [None, "0", "1"])
def test_the_interpreter_switch_restores_the_flag(before: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if before is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", before)
    with settings.interpreter():
        assert settings.current().interpret
    assert os.environ.get("TRITON_INTERPRET") == before


def test_a_worker_environment_carries_the_import_path_and_overrides() -> None:
    env = settings.child_environment(CUDA_VISIBLE_DEVICES="1")
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["PYTHONPATH"].split(os.pathsep)[0] in sys.path


@pytest.mark.parametrize(("gpu", "expected"), [(False, "1"), (True, None)])
def test_without_a_gpu_the_interpreter_is_switched_on(gpu: bool, expected: str | None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    assert settings.interpret_without_gpu() is (not gpu)  # the rule the CLI and the API share
    assert os.environ.get("TRITON_INTERPRET") == expected


def test_triton_here_was_built_for_the_interpreter() -> None:
    import triton  # noqa: F401  (conftest switched the interpreter on before anything imported Triton)

    assert not settings.triton_built_for_gpu()
