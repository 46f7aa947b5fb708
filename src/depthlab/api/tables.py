"""The store as pandas tables: one row per run, and every metrics row in long form.

:func:`runs_frame`: ``id, status, task, model, step, created, updated, error``, ``cell`` (the same for runs
whose configs differ only in the seed: ``df.groupby("cell")`` pools seeds and nothing else), then every config field
as a dotted column (``task.k``, ``model.layers``, ``train.lr``, ``seed``), then the final metrics (``accuracy``,
``loss``, ``steps``, ``chance`` …; nested ones dotted, ``partial_losses.x1``; one that would repeat a column's
name is ``final.<name>``). :func:`metrics_frame`: ``run_id, step, split, metric, value``.

Each column gets the dtype its values call for: ``int64`` (``Int64`` where some runs lack the field),
``float64`` (NaN where missing), ``bool`` (``boolean``), ``str``, ``datetime64`` (UTC) for the times, and
``object`` for lists (``model.heads: [1, 1, 6]``) or mixed values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    import pandas as pd

RUN_COLUMNS = ("id", "status", "task", "model", "step", "created", "updated", "error")
CELL_COLUMN = "cell"  # the run's cell: equal for runs whose configs differ only in the seed (depthlab.cells)
TIME_COLUMNS = ("created", "updated")
METRIC_COLUMNS = ("run_id", "step", "split", "metric", "value")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def column_dtype(values: Sequence[Any]) -> str:
    """The dtype for a column holding ``values`` (None where a run has no value)."""
    present = [v for v in values if v is not None]
    complete = len(present) == len(values)
    if not present:
        return "object"
    if all(isinstance(v, bool) for v in present):
        return "bool" if complete else "boolean"
    if all(_is_int(v) for v in present):
        return "int64" if complete else "Int64"
    if all(_is_int(v) or isinstance(v, float) for v in present):
        return "float64"
    if all(isinstance(v, str) for v in present):
        return "str"
    return "object"


def typed_frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    """``rows`` as a DataFrame with ``columns`` in order, each of the dtype its values call for."""
    import pandas as pd

    data = {}
    for name in columns:
        values = [row.get(name) for row in rows]
        dtype = column_dtype(values)
        missing = pd.NA if dtype in ("Int64", "boolean") else float("nan") if dtype in ("float64", "str") else None
        data[name] = pd.Series([missing if v is None else v for v in values], dtype=dtype)
    return pd.DataFrame(data, columns=columns)


def runs_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Store records (``Store.find_runs``) as one row per run, in their order (see the module's docstring)."""
    import pandas as pd

    from ..cells import cell_id
    from ..fields import flat_fields

    rows, config_columns, final_columns = [], {}, {}
    for record in records:
        row = {name: record[name] for name in RUN_COLUMNS}
        row[CELL_COLUMN] = cell_id(record["config"] or {})
        for name, value in flat_fields(record["config"] or {}).items():
            row[name] = value
            config_columns.setdefault(name, None)
        for name, value in flat_fields(record["final"] or {}).items():
            column = f"final.{name}" if name in RUN_COLUMNS or name in config_columns else name
            row[column] = value
            final_columns.setdefault(column, None)
        rows.append(row)
    frame = typed_frame(rows, [*RUN_COLUMNS, CELL_COLUMN, *config_columns, *final_columns])
    for name in TIME_COLUMNS:
        frame[name] = pd.to_datetime(frame[name].astype("float64"), unit="s", utc=True)
    return frame


def metrics_frame(rows: Sequence[tuple[str, int, str, str, float]]) -> pd.DataFrame:
    """Metrics rows ``(run_id, step, split, name, value)`` (``Store.metric_rows``) as a long DataFrame."""
    import pandas as pd

    run_ids, steps, splits, names, values = zip(*rows, strict=True) if rows else ((), (), (), (), ())
    return pd.DataFrame({"run_id": pd.Series(run_ids, dtype="str"), "step": pd.Series(steps, dtype="int64"),
                         "split": pd.Series(splits, dtype="str"), "metric": pd.Series(names, dtype="str"),
                         "value": pd.Series(values, dtype="float64")}, columns=list(METRIC_COLUMNS))


TABLE_FORMATS = ("csv", "parquet", "json")


def _text_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns (lists, mixed values) as JSON text, so every column has one type (CSV, Parquet)."""
    import json

    import pandas as pd

    out = frame.copy()
    for name in [name for name in out.columns if pd.api.types.is_object_dtype(out[name].dtype)]:
        out[name] = out[name].map(lambda v: None if v is None else json.dumps(v, default=str))
    return out


def table_bytes(frame: pd.DataFrame, fmt: str) -> bytes:
    """``frame`` written as ``csv``, ``parquet`` (needs pyarrow) or ``json`` (an array of records; NaN as null)."""
    import io

    buffer = io.BytesIO()
    write_table([frame], fmt, buffer)
    return buffer.getvalue()


def check_format(fmt: str) -> None:
    """A UserError unless ``fmt`` is a format :func:`write_table` can write here (Parquet needs pyarrow)."""
    import importlib.util

    from ..errors import UserError

    if fmt not in TABLE_FORMATS:
        raise UserError(f"--format: must be one of {', '.join(TABLE_FORMATS)} (got {fmt!r})")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise UserError("--format parquet: needs pyarrow; pip install 'depthlab[parquet]'")


def write_table(pages: Iterable[pd.DataFrame], fmt: str, file: BinaryIO) -> None:
    """The pages of one table (frames of the same columns, at least one) written to ``file`` as one ``csv``,
    ``parquet`` (needs pyarrow) or ``json`` file, a page at a time: the bytes :func:`table_bytes` gives for their
    concatenation, with memory for one page."""
    check_format(fmt)
    if fmt == "json":
        separator = b"["
        for frame in pages:
            text = frame.to_json(orient="records", date_format="iso")
            if text != "[]":
                file.write(separator + text[1:-1].encode())
                separator = b","
        file.write(b"[]\n" if separator == b"[" else b"]\n")
    elif fmt == "csv":
        for i, frame in enumerate(pages):
            file.write(_text_cells(frame).to_csv(index=False, header=i == 0).encode())
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        writer = None
        for frame in pages:
            table = pa.Table.from_pandas(_text_cells(frame), preserve_index=False)
            writer = writer or pq.ParquetWriter(file, table.schema)
            writer.write_table(table.cast(writer.schema))
        if writer is not None:
            writer.close()
