"""The studies kept in an Optuna storage, as `fusionsearch studies` lists them: what each searched (the graph
its creator recorded, search.identity.study_identity), how its trials ended and its best time. Reading only: a
storage that does not exist is refused, never created."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import optuna

from fusionsearch.errors import SpecError
from fusionsearch.search.slots import laid_out
from fusionsearch.search.storage import make_storage, redact


@dataclass(frozen=True)
class StudySummary:
    """One study: its name, the graph it searched ('' when it recorded none), its backend, trials by how they
    ended (waiting: slots not run yet, laid out or not), and its best trial's value (µs; measured on the gpu
    backend, predicted otherwise; None without)."""

    name: str
    graph_name: str
    graph_hash: str
    backend: str
    complete: int
    pruned: int
    failed: int
    waiting: int
    best_us: float | None

    def graph(self) -> str:
        """The graph as a person reads it: its recorded name and signature hash."""
        if not self.graph_hash:
            return "-"
        return f"{self.graph_name} ({self.graph_hash})" if self.graph_name else self.graph_hash


def open_existing(url: str) -> Any:
    """The storage at `url` (as `search --storage` takes it), refused when its file does not exist: reading
    must not leave an empty database behind a mistyped name."""
    path = None
    if url.startswith("journal:"):
        path = url.removeprefix("journal:")
    elif url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///").split("?", 1)[0]
        path = None if path in ("", ":memory:") else path
    if path is not None and os.path.isdir(path):
        raise SpecError(f"storage {redact(url)}: {path!r} is a directory, not a storage file")
    if path is not None and not os.path.isfile(path):
        raise SpecError(f"storage {redact(url)}: no such file {path!r}")
    if path is not None and url.startswith("sqlite"):
        _check_optuna_sqlite(url, path)
    return make_storage(url)


def _check_optuna_sqlite(url: str, path: str) -> None:
    """Refuse a SQLite file that holds no Optuna storage, read-only: opening it as one would add Optuna's tables
    to someone else's database."""
    import sqlite3

    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error as e:
        raise SpecError(f"storage {redact(url)} cannot be read: {e}") from None
    if "studies" not in tables:
        raise SpecError(f"storage {redact(url)} is not an Optuna storage (no studies table)")


def list_studies(url: str) -> list[StudySummary]:
    """Every study in the storage at `url`, by name; SpecError when it cannot be opened or read."""
    storage = open_existing(url)
    try:
        studies = storage.get_all_studies()
        out = []
        for s in sorted(studies, key=lambda s: s.study_name):
            trials = storage.get_all_trials(s._study_id, deepcopy=False)
            out.append(_summary(s.study_name, s.user_attrs, trials))
    except SpecError:
        raise
    except Exception as e:  # a file that is not a journal, a database of another schema
        why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise SpecError(f"storage {redact(url)} cannot be read: {why}") from None
    return out


def _summary(name: str, attrs: dict[str, Any], trials: list[optuna.trial.FrozenTrial]) -> StudySummary:
    state = optuna.trial.TrialState
    by_state = {st: sum(t.state == st for t in trials) for st in state}
    values = [t.value for t in trials if t.state == state.COMPLETE and t.value is not None]
    unlaid = max(0, int(attrs.get("slots", 0)) - laid_out(trials))  # slots are laid out as workers need them
    return StudySummary(name, str(attrs.get("graph_name", "")), str(attrs.get("graph", "")),
                        str(attrs.get("backend", "")), by_state[state.COMPLETE], by_state[state.PRUNED],
                        by_state[state.FAIL], by_state[state.WAITING] + by_state[state.RUNNING] + unlaid,
                        min(values) if values else None)


def format_studies(summaries: list[StudySummary]) -> str:
    """A header line, then one line per study (columns aligned)."""
    rows = [("study", "graph", "backend", "complete", "pruned", "failed", "waiting", "best us")]
    for s in summaries:
        rows.append((s.name, s.graph(), s.backend or "-", str(s.complete), str(s.pruned), str(s.failed),
                     str(s.waiting), "-" if s.best_us is None else f"{s.best_us:.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        left = [f"{c:<{w}}" for c, w in zip(r[:3], widths[:3], strict=True)]
        right = [f"{c:>{w}}" for c, w in zip(r[3:], widths[3:], strict=True)]
        lines.append("  ".join(left + right))
    return "\n".join(lines)
