"""Issue 53 item 8: `tune-model`'s bar read "5 to search" over 0/6: its words named distinct searches, its
count regions. They now name both, the total in regions as the count is; and the bar is plain lines off a
terminal, as every bar of the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fusionsearch import cli

FACTORY = '''
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(64, 96), torch.nn.Linear(96, 64)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(Block(), Block(), Block())
'''


def test_the_tune_model_bar_counts_regions_in_its_words_and_its_total(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "model.py").write_text(FACTORY)
    argv = ["tune-model", f"{tmp_path / 'model.py'}:make", "--inputs", "16x64", "--trials", "2", "--backend",
            "model", "--cache", str(tmp_path / "plans")]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert "tuned 6 matmul regions: 2 searched, 4 loaded" in captured.out
    bar = [ln for ln in captured.err.splitlines() if ln.startswith("fusionsearch: ")]
    assert bar and "\r" not in captured.err, captured.err
    for line in bar:
        m = re.match(r"fusionsearch: (\d+) regions, (\d+) distinct to search: (\d+)/(\d+) regions", line)
        assert m and m[1] == m[4] == "6" and m[2] == "2", line
    assert bar[-1].startswith("fusionsearch: 6 regions, 2 distinct to search: 6/6 regions"), bar
