"""benchmarks/results/ holds records, not copies (issue 55): every run is a folder with a COMMAND.md that names the
commit of the scripts it ran and a line in the index README.md, and no folder keeps a copy of a script that
lives in benchmarks/ (a script is referenced by commit). Files only: no git, no GPU."""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
BENCHMARKS = RESULTS.parent
SCRIPTS = re.compile(r"Scripts at commit `?([0-9a-f]{7,40})`?: \S")
ROW = re.compile(r"^\| \[([^\]]+)\]\(\1/\) \|.*\| (?:—|\[([^\]]+)\]\(\2/\)) \|$")


def folders() -> list[str]:
    return sorted(p.name for p in RESULTS.iterdir() if p.is_dir())


def index_rows() -> dict[str, str | None]:
    """run -> the run that supersedes it (None where none does), from the index's table."""
    rows = {}
    for line in (RESULTS / "README.md").read_text().splitlines():
        m = ROW.match(line)
        if m:
            assert m.group(1) not in rows, f"two index lines for {m.group(1)}"
            rows[m.group(1)] = m.group(2)
    return rows


def test_every_entry_of_results_is_a_run_folder_besides_the_index() -> None:
    loose = sorted(p.name for p in RESULTS.iterdir() if p.is_file() and p.name != "README.md")
    assert not loose, f"files outside a run's folder: {loose}"
    assert len(folders()) > 90


def test_every_run_has_a_command_md_naming_the_commit_of_its_scripts() -> None:
    missing = [f for f in folders() if not (RESULTS / f / "COMMAND.md").is_file()]
    assert not missing, f"runs without COMMAND.md: {missing}"
    unnamed = [f for f in folders() if not SCRIPTS.search((RESULTS / f / "COMMAND.md").read_text())]
    assert not unnamed, f"COMMAND.md without 'Scripts at commit HASH: PATHS': {unnamed}"


def test_the_index_has_one_line_a_run_and_names_only_runs_that_exist() -> None:
    rows = index_rows()
    assert sorted(rows) == folders(), (sorted(set(folders()) - set(rows)), sorted(set(rows) - set(folders())))
    stale = {run: later for run, later in rows.items() if later is not None and later not in rows}
    assert not stale, f"superseded by a run that is not in results/: {stale}"
    assert all(later != run for run, later in rows.items())


def test_no_run_keeps_a_copy_of_a_script_in_benchmarks() -> None:
    living = {p.read_bytes(): p.name for p in list(BENCHMARKS.glob("*.py")) + list(BENCHMARKS.glob("*.sh"))}
    copies = [f"{p.relative_to(RESULTS)} = benchmarks/{living[p.read_bytes()]}"
              for p in sorted(RESULTS.rglob("*")) if p.suffix in (".py", ".sh") and p.read_bytes() in living]
    assert not copies, f"copies of benchmarks/ scripts (reference them by commit in COMMAND.md): {copies}"
