"""What the CLI tests share: a user error is one line on stderr, exit 2, no traceback."""

from __future__ import annotations

import pytest

from fusionsearch.cli import main


def user_error(argv: list[str], capsys: pytest.CaptureFixture[str], *words: str) -> str:
    """Run the CLI on `argv`; assert it fails as a user error saying each of `words`; return the line."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and err.startswith("fusionsearch: error: "), err
    assert "Traceback" not in err + captured.out
    for w in words:
        assert w in err, (w, err)
    return err
