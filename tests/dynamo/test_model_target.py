"""The model `fusionsearch tune-model` names, loaded by dynamo/model_target.py (once the CLI's own work): the
factory imported after Triton's interpreter is chosen, inputs drawn from the shapes given, refusals in one
sentence."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from fusionsearch.dynamo.model_target import load_model
from fusionsearch.errors import SpecError

FACTORY = """import os
import torch
SEEN = os.environ.get("TRITON_INTERPRET")
def make():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    model.seen = SEEN  # TRITON_INTERPRET when this module was imported
    return model
def pair():
    return torch.nn.Linear(8, 4), [torch.ones(2, 8)]
def not_a_module():
    return 3
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is switched on only without a GPU")
def test_the_factory_is_imported_after_the_interpreter_is_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "m.py").write_text(FACTORY)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    target = load_model(f"{tmp_path / 'm.py'}:make", [((3, 8), torch.float16)])
    assert target.model.seen == "1" and os.environ["TRITON_INTERPRET"] == "1"
    expected = torch.randn(3, 8, generator=torch.Generator().manual_seed(0)).to(torch.float16)
    assert target.device == "cpu" and len(target.inputs) == 1 and torch.equal(target.inputs[0], expected)
    assert isinstance(target.model, torch.nn.Linear) and not target.model.training


def test_a_factorys_own_inputs_serve_when_no_shapes_are_given(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(FACTORY)
    target = load_model(f"{tmp_path / 'm.py'}:pair")
    assert torch.equal(target.inputs[0], torch.ones(2, 8))
    for name, words in (("make", "give --inputs"), ("not_a_module", "returned a int, not a torch.nn.Module"),
                        ("absent", "has no callable 'absent'")):
        with pytest.raises(SpecError, match=words):
            load_model(f"{tmp_path / 'm.py'}:{name}")
    with pytest.raises(SpecError, match="MODULE:FACTORY"):
        load_model(str(tmp_path / "m.py"))
