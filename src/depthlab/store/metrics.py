"""The metrics of a store's runs: written per step, read back a run or a page at a time (:class:`StoreMetrics`, a
part of :class:`depthlab.store.Store`, which gives it its connection: ``_write``, ``_read``, ``_stream``,
``_damaged``). Metric values are stored as REAL; a NaN is stored as NULL and read back as NaN."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from depthlab.store.rows import DamagedRow, metric_value

IN_CHUNK = 500  # ids per IN (...) clause, well below SQLite's variable limit


def _value(v: Any) -> float | None:
    if v is None:
        return None
    x = float(v)
    return None if math.isnan(x) else x


class StoreMetrics:
    """Metrics rows of the store's runs (see the module)."""

    def log_metrics(self, run_id: str, step: int, split: str, values: dict[str, float]) -> None:
        """Record ``values`` of one run at ``step``; re-logging a step replaces its rows."""
        self.log_metrics_many([(run_id, step, split, values)])

    def log_metrics_many(self, rows: Sequence[tuple[str, int, str, dict[str, float]]]) -> None:
        """Record metrics of many runs (``(run_id, step, split, values)`` each) in one transaction."""
        flat = [
            (run_id, int(step), split, str(name), _value(v))
            for run_id, step, split, values in rows
            for name, v in values.items()
        ]
        if not flat:
            return
        with self._write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO metrics (run_id, step, split, name, value) VALUES (?, ?, ?, ?, ?)",
                flat,
            )

    def metric_columns(self, run_id: str, split: str | None = None) -> dict[str, dict[str, list]]:
        """One run's metrics as ``{split: {"step": [...], name: [...]}}`` ordered by step; a name missing at a step
        is NaN. (``depthlab.Store.metrics`` gives every run's as one long pandas table.)"""
        sql = "SELECT step, split, name, value FROM metrics WHERE run_id = ?"
        params: list[Any] = [run_id]
        if split is not None:
            sql += " AND split = ?"
            params.append(split)
        table: dict[str, dict[int, dict[str, float]]] = {}
        for step, sp, name, value in self._metric_rows(self._read(sql + " ORDER BY split, step, name", params),
                                                       run_id):
            table.setdefault(sp, {}).setdefault(step, {})[name] = value
        out: dict[str, dict[str, list]] = {}
        for sp, by_step in table.items():
            steps = sorted(by_step)
            names = sorted({n for vals in by_step.values() for n in vals})
            columns: dict[str, list] = {"step": steps}
            for name in names:
                columns[name] = [by_step[s].get(name, math.nan) for s in steps]
            out[sp] = columns
        return out

    def metric_rows(self, run_ids: Sequence[str] | None = None) -> list[tuple[str, int, str, str, float]]:
        """Every metrics row ``(run_id, step, split, name, value)`` of ``run_ids`` (default: every run), runs in
        creation order (or the order of ``run_ids``), then by split, step and name; a NaN value reads back as NaN."""
        return list(self.iter_metric_rows(run_ids))

    def iter_metric_rows(self, run_ids: Sequence[str] | None = None) -> Iterator[tuple[str, int, str, str, float]]:
        """The rows of :meth:`metric_rows`, read a page at a time (memory stays flat in the store's size)."""
        sql = ("SELECT m.run_id, m.step, m.split, m.name, m.value FROM metrics m LEFT JOIN runs r ON r.id = m.run_id"
               " {where} ORDER BY {order} m.run_id, m.split, m.step, m.name")
        if run_ids is None:
            chunks: Iterable[tuple[str, list[str]]] = [("", [])]
        else:
            unique = list(dict.fromkeys(run_ids))
            chunks = ((f"WHERE m.run_id IN ({', '.join('?' * len(chunk))})", chunk)
                      for chunk in (unique[i : i + IN_CHUNK] for i in range(0, len(unique), IN_CHUNK)))
        for where, chunk in chunks:
            rows = self._stream(sql.format(where=where, order="" if chunk else "coalesce(r.created, 0),"), chunk)
            by_run: Iterable[tuple[Any, Iterable[tuple]]] = itertools.groupby(rows, key=lambda row: row[0])
            if chunk:  # in the order asked for: a chunk's rows (at most 500 runs') put in that order
                runs = {run_id: list(group) for run_id, group in by_run}
                by_run = ((run_id, runs[run_id]) for run_id in chunk if run_id in runs)
            for run_id, rows_of_run in by_run:
                yield from ((run_id, *row) for row in self._metric_rows([r[1:] for r in rows_of_run], run_id))

    def _metric_rows(self, rows: list[tuple], run_id: str) -> list[tuple[int, str, str, float]]:
        """``(step, split, name, value)`` rows of one run with their values read (NULL and NaN as NaN); a row whose
        run id is not text, step not an integer, split or name not text, or value not a number is left out and
        noted in :attr:`damage`."""
        out = []
        for step, split, name, value in rows:
            try:
                if not isinstance(run_id, str):
                    raise DamagedRow("run_id", f"is {str(run_id)[:40]!r}, not a run id")
                if isinstance(step, bool) or not isinstance(step, int):
                    raise DamagedRow("step", f"is {str(step)[:40]!r}, not an integer")
                for column, text in (("split", split), ("name", name)):
                    if not isinstance(text, str) or not text:
                        raise DamagedRow(column, f"is {str(text)[:40]!r}, not a name")
                out.append((step, split, name, metric_value(value)))
            except DamagedRow as e:
                self._damaged(f"run {run_id}", f"metrics {step} {split} {name}",
                              f"metrics row (step {str(step)[:20]}, {split}, {name}): {e}")
        return out
