"""A store larger than a page: `runs` shows 500 runs and says which, `--offset` and `--limit` page through the
rest, `runs --json` and `metrics` stream every row, `report` details 200 runs and counts the others in their cells
(issue 47, item 4; the times and memory at 100,000 runs are benchmarks/store_scale.py's)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from conftest import run_depthlab
from depthlab.api.tables import metrics_frame
from depthlab.config import parse_run
from depthlab.store import Store, to_json

RUNS = 60  # more than a table's page and the report's detailed runs, made small here (500 and 200 by default)
PAGE, DETAILED = 25, 10


@pytest.fixture(autouse=True)
def small_pages(monkeypatch):
    monkeypatch.setattr("depthlab.cli.runs.TABLE_ROWS", PAGE)
    monkeypatch.setattr("depthlab.report.html.DETAILED_RUNS", DETAILED)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """60 finished runs of 3 cells (two learning rates and a depth), written straight into SQLite; 1 in 10 with a
    curve."""
    root = tmp_path_factory.mktemp("pages") / "store"
    Store(root).close()
    runs, metrics = [], []
    for i in range(RUNS):
        config = parse_run({"task": {"name": "memorization"}, "seed": i // 3,
                            "model": {"name": "attention_only", "layers": 1 + (i % 3 == 2)},
                            "train": {"lr": 0.01 if i % 3 == 1 else 0.1}}).to_dict()
        run_id = Store.run_id(config)
        final = {"accuracy": (i % 7) / 7, "loss": 0.5, "steps": 100, "chance": 0.125}
        runs.append((run_id, "memorization", "attention_only", to_json(config), "done", 100, 1000.0 + i, 1000.0 + i,
                     to_json(final), None, None, "[]"))
        if i % 10 == 0:
            metrics += [(run_id, step, "eval", name, step / 100) for step in (50, 100) for name in ("accuracy", "loss")]
    with sqlite3.connect(root / "depthlab.sqlite") as conn:
        conn.executemany("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", runs)
        conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?)", metrics)
    return root


def test_runs_shows_a_page_says_which_and_pages_through_the_rest(store):
    code, out, err = run_depthlab("runs", "--json", "--store", str(store))
    every = [r["id"] for r in json.loads(out)["runs"]]
    assert code == 0 and every == [r["id"] for r in Store(store, readonly=True).find_runs()] and len(every) == RUNS
    code, out, err = run_depthlab("runs", "--store", str(store))
    shown = [line.split()[0] for line in out.splitlines() if re.match(r"^\s*[0-9a-f]{8,} ", line)]
    assert code == 0 and len(shown) == PAGE and all(every[i].startswith(s) for i, s in enumerate(shown)), err
    assert "runs 1 to 25 of 60 (oldest first): --offset 25 for the next" in " ".join(out.split())
    code, out, err = run_depthlab("runs", "--offset", "50", "--store", str(store))
    shown = [line.split()[0] for line in out.splitlines() if re.match(r"^\s*[0-9a-f]{8,} ", line)]
    assert code == 0 and len(shown) == 10 and all(every[50 + i].startswith(s) for i, s in enumerate(shown)), err
    assert "lr" in out  # the shown runs of one task and depth differ in their learning rate: a column
    code, out, err = run_depthlab("runs", "--json", "--limit", "3", "--offset", "10", "--store", str(store))
    assert code == 0 and [r["id"] for r in json.loads(out)["runs"]] == every[10:13], err


def test_metrics_stream_the_same_table_and_report_details_some_runs_and_counts_every_run(store, tmp_path):
    rows = Store(store, readonly=True).metric_rows()
    code, out, err = run_depthlab("metrics", "--format", "json", "--out", str(tmp_path / "m.json"), "--store",
                                  str(store))
    expected = metrics_frame(rows).to_json(orient="records", date_format="iso") + "\n"
    assert code == 0 and (tmp_path / "m.json").read_text() == expected and len(rows) == 24, err
    code, out, err = run_depthlab("report", "--examples", "0", "--json", "--out", str(tmp_path / "r.html"),
                                  "--store", str(store))
    assert code == 0 and json.loads(out)["runs"] == RUNS, err
    page = (tmp_path / "r.html").read_text()
    assert "10 of 60 runs: each cell" in page and "the other 50 count in their cells" in page
    assert page.count('<tr data-run="') == DETAILED
    # every run counts in its cell's accuracy (3 cells of 20 seeds), not only the detailed ones
    assert "over 20 seeds" in page and not re.search(r"over [0-9] seeds", page)


class Record(dict):
    """A store record that can be watched (a plain dict takes no weak reference)."""


def test_report_holds_a_bounded_number_of_runs_however_many_the_store_has(store, tmp_path, monkeypatch):
    """Every run counts in its cell's numbers, but the report keeps at most twice the detailed runs at once (the
    ranks that can still be chosen, ``report.gather.DetailPicker``): memory stays flat from 10,000 to 100,000 runs
    (benchmarks/store_scale.py). Before, the report held every selected run's record."""
    import weakref

    from depthlab.report.html import build_report
    from depthlab.store.sqlite import Store as SqliteStore

    alive, most = [0], [0]
    iter_runs = SqliteStore.iter_runs

    def watched(self, *args, **kwargs):
        for run in iter_runs(self, *args, **kwargs):
            record = Record(run)
            alive[0] += 1
            most[0] = max(most[0], alive[0])
            weakref.finalize(record, lambda: alive.__setitem__(0, alive[0] - 1))
            yield record

    monkeypatch.setattr(SqliteStore, "iter_runs", watched)
    result = build_report(Store(store, readonly=True), tmp_path / "r.html", examples=0)
    assert result["runs"] == RUNS and 0 < most[0] <= 2 * DETAILED + 1, most[0]
    assert "over 20 seeds" in (tmp_path / "r.html").read_text()


def test_the_detailed_runs_are_each_cells_first_then_second_as_a_sort_by_rank_would_choose():
    """``DetailPicker`` streaming chooses what sorting every run by its rank in its cell (stable: the listing's
    order among equals) and taking the first ``limit`` chose, for cells of every size."""
    import random

    from depthlab.report.gather import DetailPicker

    rng = random.Random(0)
    for _ in range(200):
        limit, n = rng.randint(1, 12), rng.randint(0, 80)
        cells = [rng.randint(0, rng.randint(0, 15)) for _ in range(n)]
        ranks, seen = [], {}
        for cell in cells:
            ranks.append(seen.get(cell, 0))
            seen[cell] = seen.get(cell, 0) + 1
        picker = DetailPicker(limit)
        for place, rank in enumerate(ranks):
            picker.offer({"place": place}, rank, place)
            assert sum(map(len, picker.kept)) <= 2 * limit
        expected = sorted(sorted(range(n), key=lambda i: ranks[i])[:limit])
        assert [r["place"] for r in picker.chosen()] == expected


def test_runs_json_written_a_page_at_a_time_is_one_json_object_with_the_same_rows(store, monkeypatch):
    """``runs --json`` encodes its runs a page at a time and finds each cell's id and settings once per cell (a
    small page and a cache of two cells here, cleared as it fills): still one JSON object, the same bytes."""
    code, whole, err = run_depthlab("runs", "--json", "--store", str(store))
    monkeypatch.setattr("depthlab.cli.runs.JSON_PAGE", 7)
    monkeypatch.setattr("depthlab.cli.runs.CELLS_KEPT", 2)
    code, paged, err = run_depthlab("runs", "--json", "--store", str(store))
    assert code == 0 and paged == whole and len(json.loads(paged)["runs"]) == RUNS, err
    rows = json.loads(paged)["runs"]
    assert len({r["cell"] for r in rows}) == 3 and {r["settings"]["train.lr"] for r in rows} == {0.01, 0.1}
