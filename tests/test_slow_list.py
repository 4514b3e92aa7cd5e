"""The slow-test list in tests/conftest.py names only tests that exist (a renamed or removed test must leave it),
and the first test command leaves those tests out while `-m slow` selects exactly them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import SLOW_FILES, SLOW_TESTS

ROOT = Path(__file__).resolve().parents[1]


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


def test_every_slow_entry_names_a_test_that_exists() -> None:
    missing = [f for f in SLOW_FILES if not (ROOT / f).is_file()]
    for nodeid in SLOW_TESTS:
        path, name = nodeid.split("::")
        if not (ROOT / path).is_file() or name not in _functions(ROOT / path):
            missing.append(nodeid)
    assert not missing, f"take these off tests/conftest.py's slow list: {missing}"


def _collected(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider",
                          "tests/test_slow_list.py", "tests/test_cli_tools.py",
                          *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout
    return {line.split("[")[0] for line in out.splitlines() if "::" in line}


def test_the_first_command_leaves_the_slow_tests_out_and_the_second_runs_only_them() -> None:
    fast, slow = _collected(), _collected("-m", "slow")
    marked = {t for t in fast | slow if t.split("::")[0] in SLOW_FILES or t in SLOW_TESTS}
    assert slow and fast and not fast & slow
    assert slow == marked and "tests/test_slow_list.py::test_every_slow_entry_names_a_test_that_exists" in fast
