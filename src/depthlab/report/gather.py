"""What a report reads of the store, in one pass over its runs: every selected run counts in its cell's numbers
(``analysis.capability.CellTally``), and a bounded number of them are kept whole, the *detailed* runs (a row of the
runs table, their own curves and attention maps). Memory stays flat in the number of runs: a store of 100,000 runs
keeps a few hundred records, as pandas' ``display.max_rows`` shows a bounded part of a long table and says what it
left out.

The detailed runs are each cell's first run, then each cell's second, and so on, in the listing's order (oldest
first), until ``limit``: a run that is the r-th of its cell is chosen when fewer than ``limit`` runs are the first
to r-1-th of theirs, and among those of rank r, by its place in the listing. Runs that are not trained runs
(``llm-bench``) have no cell and rank first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..analysis.capability import CellTally, cell_rows
from ..analysis.runs import is_trained, iter_selected
from ..cells import cell_key
from ..store import Store


class DetailPicker:
    """Chooses the ``limit`` detailed runs while the runs stream past (see the module's docstring), holding at most
    ``2 × limit`` records: those of the ranks that can still be chosen, at most ``limit`` of each."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.counts: list[int] = []  # runs seen of each open rank
        self.kept: list[list[tuple[int, dict[str, Any]]]] = []  # (place, record) of each open rank, at most limit
        self.open = limit  # ranks from here on cannot be chosen: limit runs of lower ranks come first

    def offer(self, record: dict[str, Any], rank: int, place: int) -> None:
        if rank >= self.open:
            return
        while len(self.counts) <= rank:
            self.counts.append(0)
            self.kept.append([])
        self.counts[rank] += 1
        if len(self.kept[rank]) < self.limit:
            self.kept[rank].append((place, record))
        before = 0
        for r, count in enumerate(self.counts[: self.open]):
            if before >= self.limit:  # rank r and above are shut out for good: counts only grow
                self.open = r
                del self.counts[r:], self.kept[r:]
                break
            before += count

    def chosen(self) -> list[dict[str, Any]]:
        """The detailed runs, in the listing's order."""
        ranked = [(rank, place, record) for rank, kept in enumerate(self.kept) for place, record in kept]
        ranked.sort(key=lambda item: item[:2])
        return [record for _, _, record in sorted(ranked[: self.limit], key=lambda item: item[1])]


@dataclass
class Gathered:
    """A report's reading of the store: how many runs it covers and their statuses, the capability rows of their
    cells (each cell's ``runs``: the ids of its first ``keep`` runs and of its detailed runs; ``n_runs``: how many
    it has), one config per cell (every run's, trained or not) and the detailed runs' records."""

    count: int
    statuses: Counter[str]
    cells: list[dict[str, Any]]
    configs: list[dict[str, Any]]
    detailed: list[dict[str, Any]]


def gather(runs: Iterable[dict[str, Any]], limit: int, keep: int) -> Gathered:
    """Read ``runs`` (store records, oldest first) once: see :class:`Gathered`."""
    tallies: dict[str, CellTally] = {}
    configs: dict[str, dict[str, Any]] = {}
    picker = DetailPicker(limit)
    statuses: Counter[str] = Counter()
    keys: dict[str, str] = {}  # a config's text less its seed (``Store.iter_runs``): its cell key, found once
    count = 0
    for place, record in enumerate(runs):
        count += 1
        statuses[record["status"]] += 1
        config = record["config"] or {}
        text = record.get("cell_text")
        key = keys.get(text) if text is not None else None
        if key is None:
            key = cell_key(config)
            if text is not None:
                keys[text] = key
        configs.setdefault(key, config)
        rank = 0
        if is_trained(record):
            if key not in tallies:
                tallies[key] = CellTally(config, keep)
            rank = tallies[key].n_runs
            tallies[key].add(record, place)
        picker.offer(record, rank, place)
    detailed = picker.chosen()
    rows = cell_rows(tallies.values())
    _add_detailed(rows, list(tallies), detailed)
    return Gathered(count, statuses, rows, list(configs.values()), detailed)


def _add_detailed(rows: list[dict[str, Any]], keys: list[str], detailed: list[dict[str, Any]]) -> None:
    """Each cell's ``runs``: the ids of its first runs, then of its detailed runs past those (later in the listing,
    as the first are its earliest), in the listing's order."""
    by_key = dict(zip(keys, rows, strict=True))
    for record in detailed:
        if is_trained(record):
            row = by_key[cell_key(record["config"])]
            if record["id"] not in row["runs"]:
                row["runs"].append(record["id"])


class SelectedRuns:
    """The runs a report covers (``ReportContext.runs``): iterating reads them again from the store, a page at a
    time; ``len`` is their number, counted by :func:`gather`."""

    def __init__(self, store: Store, text: str | None, count: int) -> None:
        self.store, self.text, self.count = store, text, count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter_selected(self.store, self.text)

    def __len__(self) -> int:
        return self.count
