"""Storage URLs to Optuna storages: in memory, a journal file, or an RDB (SQLite, PostgreSQL) with Optuna's own
heartbeat (`heartbeat_interval`, `grace_period`) whose stale-trial callback lays a dead worker's trial out
again (slots.Retry); opening retries while another worker creates the same schema; passwords never leave here
unredacted."""

from __future__ import annotations

import json
import os
import time
import warnings
from typing import Any

import optuna

from fusionsearch.errors import SpecError
from fusionsearch.search.slots import Retry

# What opening an RDB storage raises while another worker creates the same schema (PostgreSQL: a row, a table,
# or a table's row type -- "type alembic_version already exists", seen in CI -- created twice); opening again
# succeeds.
SCHEMA_RACES = ("IntegrityError", "UniqueViolation", "DuplicateTable", "DuplicateObject")
OPEN_ATTEMPTS = 10  # half a second apart: a schema another worker is creating is there well within that


def make_storage(url: str | None, heartbeat_s: int = 10) -> Any:
    """In memory when None; 'journal:PATH' for a journal file; any RDB URL (sqlite:///, postgresql://).

    RDB storages get a heartbeat: a trial whose worker stops beating for 3 heartbeats (killed, machine lost)
    is failed and laid out again (slots.Retry). Journal files have no heartbeat: slots.Slots.recover finds the
    trials of dead workers on this host by the owner each claim records."""
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # heartbeat, journal
    if url is None:
        return None
    if url.startswith("journal:"):
        return _journal(url.removeprefix("journal:"))
    if "://" not in url:
        raise SpecError(f"storage {redact(url)!r} is not a URL: use sqlite:///file.db, postgresql://..., "
                        "or journal:file.log")
    for attempt in range(OPEN_ATTEMPTS):
        try:
            sqlite = url.startswith("sqlite")
            kwargs: dict[str, Any] = {"engine_kwargs": {"connect_args": {"timeout": 60}}} if sqlite else {}
            return optuna.storages.RDBStorage(url, heartbeat_interval=heartbeat_s, grace_period=3 * heartbeat_s,
                                              heartbeat_stale_trial_callback=Retry(), **kwargs)
        except Exception as e:  # a bad URL or unreachable server is the user's to fix
            if attempt < OPEN_ATTEMPTS - 1 and ("sqlite" in url or any(race in repr(e) for race in SCHEMA_RACES)):
                time.sleep(0.5)  # another worker is creating the schema at this moment
                continue
            why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            if "DB access module" in why and url.startswith("postgresql"):
                why = "no PostgreSQL driver: pip install 'psycopg[binary]' (or fusionsearch's [postgres] extra)"
            raise SpecError(f"storage {redact(url)} cannot be opened: {why}") from None
    raise AssertionError("unreachable")


def _journal(path: str) -> Any:
    """A journal file's storage; SpecError when the path cannot hold one (a directory, a missing directory) or the
    file is not an Optuna journal (its first line is not a journal record, its text not UTF-8)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    where = f"storage journal:{path}"
    if not path:
        raise SpecError("storage journal: names no file; write journal:PATH")
    if os.path.isdir(path):
        raise SpecError(f"{where} is a directory; name a journal file (journal:DIR/study.log)")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise SpecError(f"{where}: no such directory {parent!r}")
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
    except FileNotFoundError:
        first = b""
    except OSError as e:
        raise SpecError(f"{where} cannot be read ({e.strerror})") from None
    if first:
        try:
            record = json.loads(first.decode("utf-8"))
        except ValueError:
            record = None
        if not isinstance(record, dict) or "op_code" not in record:
            raise SpecError(f"{where} is not an Optuna journal (its first line is not a journal record); name a "
                            "new file or one a search wrote") from None
    try:
        return JournalStorage(JournalFileBackend(path))
    except OSError as e:
        raise SpecError(f"{where} cannot be opened ({e.strerror})") from None
    except (ValueError, KeyError, TypeError) as e:  # a record that does not replay
        raise SpecError(f"{where} is not a readable Optuna journal ({str(e)[:200] or type(e).__name__})") from None


def redact(url: str) -> str:
    """The URL with any password replaced by ***."""
    if "://" in url and "@" in url.split("://", 1)[1]:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url
