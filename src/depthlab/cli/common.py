"""What every command shares: option types, the JSON emitter, the store and run openers, progress bars, tables,
threads, and training a list of runs with a progress bar."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer
from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType
from rich.constrain import Constrain
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table as RichTable
from rich.text import Text

from ..analysis.tables import Column, Table
from ..errors import UserError

if TYPE_CHECKING:
    from ..analysis.runs import LoadedRun
    from ..store import Store

MIN_COLUMNS = 20  # a terminal narrower than this (COLUMNS=0) made rich print nothing at all, exit 0


def sane_columns() -> None:
    """``$COLUMNS`` below :data:`MIN_COLUMNS` replaced by 80, the width of a pipe, for every console made after
    (rich reads it when a console is made); ``$COLUMNS`` that is not a number rich ignores already."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) < MIN_COLUMNS:
        os.environ["COLUMNS"] = "80"


sane_columns()  # before the first console, here or in any command
console = Console(stderr=True)  # progress and notes; results go to stdout

JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object to stdout and nothing else")]
StoreOpt = Annotated[Path | None, typer.Option("--store", help="store folder [$DEPTHLAB_STORE, ./depthlab-runs]")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override a field: --set model.layers=2")]
ExecutorOpt = Annotated[str, typer.Option("--executor", help="local (in this process) or ray (a Ray task per group)")]
AddressOpt = Annotated[str | None, typer.Option(
    "--address", help="with --executor ray: the Ray cluster (auto, HOST:6379, ray://HOST:10001); "
                      "default: start a local Ray instance")]
GroupSizeOpt = Annotated[int | None, typer.Option("--group-size", min=1, help="runs per batched group")]
DeviceOpt = Annotated[str | None, typer.Option(
    "--device", help="where every run trains (train.device): auto (a GPU when PyTorch sees one), cpu, cuda "
                     "(every GPU, a group on each) or cuda:N")]
WorkersOpt = Annotated[str | None, typer.Option(
    "--workers-per-device", help="groups trained at once on each device (train.workers_per_device): a number, or "
                                 "auto (as many as a GPU's free memory holds; 1 on the CPU)")]
LogOpt = Annotated[list[str] | None, typer.Option(
    "--log", help="mirror each run's config and metrics to a tracker: mlflow (a file store in <store>/mlruns) or "
                  "wandb (offline runs in <store>/wandb); repeatable; pip install 'depthlab[track]'")]


def with_device(set_: list[str] | None, device: str | None, executor: str = "local",
                workers: str | None = None) -> list[str] | None:
    """``--set`` with ``train.device`` from ``--device``, checked first: a device this machine lacks is one line
    before any work (with Ray, the workers' GPUs count, not this machine's); and ``train.workers_per_device`` from
    ``--workers-per-device``."""
    if workers is not None:
        from ..config import MAX_WORKERS_PER_DEVICE

        if workers != "auto" and not (workers.isdigit() and 1 <= int(workers) <= MAX_WORKERS_PER_DEVICE):
            raise UserError(f"--workers-per-device: {workers!r} is not auto or a whole number from 1 to "
                            f"{MAX_WORKERS_PER_DEVICE}")
        set_ = [*(set_ or []), f"train.workers_per_device={workers}"]
    if device is None:
        return set_
    from ..training.device import check_device_name, resolve_device

    if executor == "local":
        resolve_device(device, "--device")
    else:
        check_device_name(device, "--device")
    return [*(set_ or []), f"train.device={device}"]


def emit(obj: dict[str, Any]) -> None:
    """Print ``obj`` as one line of strict JSON (NaN and ±inf as null; anything else unknown as its text)."""
    from ..store import to_jsonable

    sys.stdout.write(json.dumps(to_jsonable(obj), allow_nan=False, default=str) + "\n")
    sys.stdout.flush()


OPENED: list[Store] = []  # the stores this command opened: what they left out is said at the end (app.main)


FIGURE_SUFFIXES = (".png", ".svg", ".pdf")  # what draw.save writes


def check_output(path: Path | None, option: str, folder: bool = False, suffixes: tuple[str, ...] = (),
                 store: Path | None = None, inputs: dict[str, Path | None] | None = None) -> None:
    """An output path checked before any work, so a command never trains for an hour and then fails to write:
    a file path that is a folder or a device (or a folder path that is a file), a suffix not in ``suffixes``, a
    folder above it that is a file or a dangling symlink, or one that cannot be written is a one-line UserError
    naming ``option``; so is one that lands on what the command reads or owns (:func:`check_not_owned`).
    Nothing is created."""
    if path is None:
        return
    from ..bounded import kind_of

    check_not_owned(path, option, folder, store, inputs or {})

    wanted = "a folder" if folder else "a file"
    if path.exists():
        kind = "a folder" if path.is_dir() else kind_of(path.stat().st_mode) or "a file"
        if kind != wanted:
            raise UserError(f"{option}: {path} is {kind}; give the path of {wanted}")
    elif path.is_symlink():
        raise UserError(f"{option}: {path} is a symlink to {os.readlink(path)}, which does not exist")
    if suffixes and not folder and path.suffix.lower() not in suffixes:
        raise UserError(f"{option}: {path} must end in {', '.join(suffixes)} (the format is read from it)")
    above = next((p for p in path.absolute().parents if p.exists() or p.is_symlink()), None)
    if above is not None and not above.is_dir():
        what = f"a symlink to {os.readlink(above)}, which does not exist" if not above.exists() else "not a folder"
        raise UserError(f"{option}: {path} cannot be written: {above} is {what}")
    target = path if path.exists() else above
    if target is not None and not os.access(target if target.is_dir() else target.parent, os.W_OK):
        raise UserError(f"{option}: {path} cannot be written: permission denied in {target}")


def check_not_owned(path: Path, option: str, folder: bool, store: Path | None,
                    inputs: dict[str, Path | None]) -> None:
    """A UserError when the output ``path`` is, or (a folder) lies inside, what the command reads or owns, compared
    after every symlink is resolved (and by inode, so a hard link counts too): the store's database and its
    ``-wal``, ``-shm`` and ``-journal`` files, its ``atlas/`` and ``reproduced/`` folders and its ``artifacts/``
    folder and each run's folder in it (a run's sub-folders, where figures and exports go by default, are
    allowed); the command's ``inputs`` (option name -> path); the running interpreter, its standard library,
    its site-packages and every module it has loaded (depthlab's own source and the plugins among them).
    ``store``: the ``--store`` given (None: ``$DEPTHLAB_STORE`` or ./depthlab-runs, where the command would
    read)."""
    from ..store import artifacts_folder, default_store_path
    from ..store.layout import owned_paths

    root = store if store is not None else default_store_path()
    target = os.path.realpath(path)
    artifacts = os.path.realpath(artifacts_folder(root))
    inside = os.path.relpath(target, artifacts).split(os.sep)
    if inside[0] != ".." and len(inside) < (2 if folder else 3):  # artifacts/RUN/SUB/… is a run's own output
        raise UserError(f"{option}: {path} is inside the store's artifacts folder ({artifacts_folder(root)}), "
                        f"where the runs' checkpoints live; give a path outside it (or in a run's sub-folder)")
    protected = [entry for entry in owned_paths(root) if entry[0] != artifacts_folder(root)]
    protected += [(p, f"{name} (an input of this command)", False) for name, p in inputs.items() if p is not None]
    protected += _interpreter_paths()
    for owned, what, tree in protected:
        real = os.path.realpath(owned)
        same = target == real or _same_file(target, real)
        if same or ((tree or os.path.isdir(real)) and target.startswith(real.rstrip(os.sep) + os.sep)):
            where = "is" if same else "is inside"
            raise UserError(f"{option}: {path} {where} {what} ({owned}); an output never replaces what depthlab "
                            f"reads or keeps: give another path")


def _same_file(a: str, b: str) -> bool:
    """Whether two existing paths are one file (a hard link is the same inode)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _interpreter_paths() -> list[tuple[Path, str, bool]]:
    """The running interpreter's files as (path, words, whole folder): the executable, the standard library,
    site-packages, depthlab's own source and every other loaded module's file (a plugin's among them)."""
    import sysconfig

    import depthlab

    trees = {Path(sysconfig.get_path(name)) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    trees.add(Path(depthlab.__file__).parent)
    out = [(tree, "the running Python's libraries", True) for tree in sorted(trees)]
    out.append((Path(sys.executable), "the running Python", False))
    folders = tuple(str(tree) + os.sep for tree in trees)
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and not file.startswith(folders):
            out.append((Path(file), f"the source of the loaded module {module.__name__}", False))
    return out


def open_store(path: Path | None, create: bool = True, readonly: bool = False) -> Store:
    """The store at ``path``, or at ``$DEPTHLAB_STORE`` / ``./depthlab-runs``. Commands that train create it;
    commands that write into an existing one pass ``create=False``, so a mistyped path is an error, not an empty
    store; commands that only read pass ``readonly=True``: opened read-only, never created, migrated or rewritten."""
    from ..store import Store, default_store_path
    from ..store.layout import ENV_VAR

    source = "--store" if path is not None or not os.environ.get(ENV_VAR, "").strip() else f"${ENV_VAR}"
    store = Store(path or default_store_path(), create=create, readonly=readonly, source=source)
    OPENED.append(store)
    return store


def damage_notes() -> list[str]:
    """One line per row the stores of this command left out because it cannot be read."""
    return [note for store in OPENED for note in store.damage.values()]


def open_run(store: Path | None, run: str, readonly: bool = True) -> tuple[Store, LoadedRun]:
    """The store and the run ``run`` (its id or a unique prefix of it), rebuilt from its checkpoint; the store is
    opened read-only unless the command records something in it (``readonly=False``: never created, though)."""
    from ..analysis.runs import load_run

    db = open_store(store, create=False, readonly=readonly)
    return db, load_run(db, db.resolve(run))


def setup_threads() -> int:
    """Every core this process may run on, unless ``OMP_NUM_THREADS`` asks for fewer (shared machines)."""
    import torch

    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    asked = os.environ.get("OMP_NUM_THREADS", "")
    if asked.isdigit() and int(asked) > 0:
        threads = min(threads, int(asked))
    torch.set_num_threads(threads)
    return threads


@contextmanager
def progress_bar(columns: list[Any], description: str, total: int | None,
                 quiet: bool) -> Iterator[tuple[Progress, Any] | None]:
    """A rich progress bar on stderr and its task; None under --json or when stderr is not a terminal."""
    if quiet or not console.is_terminal:
        yield None
        return
    with Progress(*columns, console=console) as bar:
        yield bar, bar.add_task(description, total=total)


@contextmanager
def step_progress(total: int, description: str, quiet: bool) -> Iterator[Callable[[int], None] | None]:
    """A progress bar over run-steps: yields ``advance(steps)``, or None when no bar is shown."""
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("run-steps"),
               TimeElapsedColumn(), TimeRemainingColumn()]
    with progress_bar(columns, description, total, quiet) as shown:
        yield None if shown is None else (lambda n: shown[0].advance(shown[1], n))


def check_executor(executor: str, address: str | None) -> None:
    if executor not in ("local", "ray"):
        raise UserError(f"--executor: must be local or ray (got {executor!r})")
    if address and executor != "ray":
        raise UserError("--address: only with --executor ray")


def run_sweep(runs: list, store: Store, group_size: int | None, quiet: bool, description: str,
              executor: str = "local", address: str | None = None, resources: Any = None,
              log: list[str] | None = None, size: tuple[int, int] | None = None) -> dict[str, Any]:
    """Train ``runs`` (finished ones are skipped) with ``executor``, showing a progress bar over their steps and
    mirroring them to the trackers ``log`` names. ``size``: what ``sweeps.local.preflight`` returned for these
    runs, where the caller already checked them."""
    from ..sweeps.execute import train_runs
    from ..training.tracking import open_trackers

    total = sum(r.train.steps for r in runs)
    if executor == "local" and not quiet and console.is_terminal:  # the command's size before its first run
        from ..memory import format_bytes
        from ..sweeps.local import preflight

        groups, peak = size or preflight(runs, group_size)
        console.print(f"{len(runs):,} run{'s' if len(runs) != 1 else ''} in {groups:,} group"
                      f"{'s' if groups != 1 else ''} ({total:,} run-steps); the largest group needs about "
                      f"{format_bytes(peak)}")
    with step_progress(total, description, quiet) as advance, open_trackers(log or [], store.root) as tracker:
        return train_runs(runs, store, group_size, executor, address, resources, advance, tracker)


def rich_table(table: Table) -> RenderableType:
    """``table`` for rich to print. Where the terminal is narrow (80 columns when piped) a right-aligned column (a
    number's) is never narrower than the widest word of its cells, so a cell may wrap between words ("0.987" over
    "(lr 1e-03)") but no number is split or cut; a ``no_wrap`` column (a name's) keeps each cell on one line while
    the table still fits, and wraps like the others where it would not; a word too long for its column (a
    header's) folds onto the next line. No column is ever cropped: the column widths are chosen here, within
    what each layout allows, not left to rich (which crops a table whose columns cannot all shrink)."""
    return _Fitted(table)


TEXT_WIDTH = 80  # a table's title and caption wrap at this width (or the terminal's, if narrower)


class _Fitted:
    """Rendered at the console's width, in the first layout whose narrowest form fits it: names on one line and
    headers' words whole; the same with one space between a compact table's columns instead of two; names on one
    line (headers fold); names' words whole (a compact table at one space, a framed one at its padding). A framed
    table tries each layout unframed (compact) before the next, so a frame goes before a header folds. The first
    choice is a layout that keeps every ``no_wrap`` column's cells (names, "0.996 ± 0.006") on one line, then any
    that fits; the last resort folds every name and header, then numbers too, so that every cell is shown."""

    LAYOUTS = (("whole", True, False), ("whole", True, True), ("whole", False, True), ("whole", False, False),
               ("words", False, True), ("words", False, False))  # (names, header_words, tight)
    LAST_RESORT = (("fold", False, True), ("numbers", False, True))

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType]:
        table = self._layout(console, options)
        # title and caption as wide as the terminal allows up to 80 columns, not squeezed to a narrow table's width
        width = min(options.max_width, max(Measurement.get(console, options, table).maximum, TEXT_WIDTH))
        if self.table.title:
            yield Constrain(Text(self.table.title, style="table.title", justify=self.table.title_justify), width)
        yield table
        if self.table.caption:
            yield Constrain(Text(self.table.caption, style="table.caption", justify=self.table.caption_justify),
                            width)

    def _layout(self, console: Console, options: ConsoleOptions) -> RichTable:
        layouts = [(names, header_words, tight, compact)
                   for names, header_words, tight in self.LAYOUTS
                   for compact in dict.fromkeys((self.table.compact, True))
                   if compact or not tight]  # a framed table keeps a space each side of its rules
        layouts += [(names, header_words, tight, True) for names, header_words, tight in self.LAST_RESORT]
        texts = [_ColumnText.of(column, [str(row[i]) for row in self.table.rows])  # measured once, not per layout
                 for i, column in enumerate(self.table.columns)]
        frames = {(tight, compact): _frame_width(console, self.table, tight, compact)
                  for _, _, tight, compact in layouts}
        sized = [(tight, compact, options.max_width - frames[tight, compact],
                  [text.range(names, header_words) for text in texts])
                 for names, header_words, tight, compact in layouts]
        # first a layout that keeps every no_wrap column's cells on one line, then one that fits at all
        fitting = [entry for floor in ("one_line", "least") for entry in sized
                   if sum(getattr(r, floor) for r in entry[3]) <= entry[2]]
        tight, compact, room, ranges = fitting[0] if fitting else sized[-1]
        return _rich_table(self.table, _shrink(ranges, room), tight, compact)


class _Range(NamedTuple):
    """A column's widths in terminal cells: ``least`` (the narrowest its layout allows), ``widest`` (its widest
    header or cell), ``one_line`` (the narrowest that keeps a ``no_wrap`` column's cells on one line) and
    ``header_word`` (its header's width if the header is one word, else 0)."""

    least: int
    widest: int
    one_line: int
    header_word: int


class _ColumnText(NamedTuple):
    """What a column's widths depend on, in terminal cells: its cells' widest word and longest cell, its header's
    width and the widths of its header's words."""

    justify: str
    no_wrap: bool
    widest_word: int
    longest: int
    header: int
    header_words: tuple[int, ...]

    @classmethod
    def of(cls, column: Column, cells: list[str]) -> _ColumnText:
        return cls(column.justify, column.no_wrap,
                   max((cell_len(word) for cell in cells for word in cell.split()), default=0),
                   max((cell_len(line) for cell in cells for line in cell.splitlines()), default=0),  # lines apart
                   cell_len(column.header),
                   tuple(cell_len(word) for word in column.header.split()))

    def range(self, names: str, header_words: bool) -> _Range:
        """The column's widths under a layout. ``names``: how a ``no_wrap`` left column's cells may break:
        ``whole`` (never), ``words`` (between words), ``fold`` (anywhere, as may every left column's); ``numbers``:
        every column folds, numbers too (the very last resort). ``header_words``: no column narrower than its
        header's longest word (else a header folds)."""
        if names == "numbers":
            least = 1
        elif self.justify == "right":
            least = self.widest_word
        elif names == "fold":
            least = 1
        elif self.no_wrap and names == "whole":
            least = self.longest
        else:
            least = self.widest_word
        if header_words:
            least = max([least, *self.header_words])
        least = max(least, 1)
        return _Range(least, max(self.longest, self.header, least), max(least, self.longest) if self.no_wrap else least,
                      self.header_words[0] if len(self.header_words) == 1 else 0)  # one word folds in halves


def _shrink(ranges: list[_Range], room: int) -> list[int]:
    """Column widths that fit ``room``: each column as wide as its widest cell, then the widest column that can
    shrink loses one cell at a time (a long name or header wraps first) until the table fits or none can; a
    ``no_wrap`` column's cells go onto more lines only once no other column can shrink. A one-word header that
    must fold folds in halves ("lay" over "ers", not "layer" over "s")."""
    widths = [r.widest for r in ranges]
    for floors in ([r.one_line for r in ranges], [r.least for r in ranges]):
        while sum(widths) > room:
            shrinkable = [i for i, width in enumerate(widths) if width > floors[i]]
            if not shrinkable:
                break
            i = max(shrinkable, key=lambda i: widths[i])
            half = -(-ranges[i].header_word // 2)
            widths[i] = max(floors[i], half) if widths[i] == ranges[i].header_word else widths[i] - 1
    return widths


def _frame_width(console: Console, table: Table, tight: bool, compact: bool) -> int:
    """The cells a table's rules and padding take beside its columns' content."""
    probe = _rich_table(table, [1] * len(table.columns), tight, compact, rows=False)
    return Measurement.get(console, console.options.update_width(1 << 16), probe).maximum - len(table.columns)


def _rich_table(table: Table, widths: list[int], tight: bool = False, compact: bool = False,
                rows: bool = True) -> RichTable:
    """``table`` with columns of the given content ``widths``; ``tight``: no padding (a compact table's columns
    one space apart); ``compact``: rules under the header only, no frame. A cell wider than its column wraps
    between words, and a word wider than it folds (widths come from :meth:`_ColumnText.range`, which says when)."""
    text = lambda value: None if value is None else escape(str(value))  # noqa: E731  (data, never rich markup)
    out = RichTable(**({"box": box.SIMPLE_HEAD, "pad_edge": False, "collapse_padding": True} if compact else {}),
                    **({"padding": 0} if tight else {}))  # the title and caption are drawn by _Fitted
    for column, width in zip(table.columns, widths, strict=True):
        out.add_column(text(column.header), justify=column.justify, overflow="fold", width=width)
    for row in table.rows if rows else ():
        out.add_row(*map(text, row))
    return out


def show(*tables: Table) -> None:
    """Print tables to stdout, one after the other."""
    out = Console()
    for table in tables:
        out.print(rich_table(table))
