"""Tasks of the user's own: a Python file (``--plugin my_task.py``) or an installed package's entry point.

A plugin defines a ``Task`` subclass exactly as the built-in tasks do and decorates it with ``@register``
(``depthlab.tasks.base``); from then on its name works everywhere a built-in name does (``sample``, ``train``,
``sweep``, ``capability``, ``report``, ``reproduce``). A plugin file may also register model families
(``depthlab.models.base.register``). Installed packages declare their task modules as entry points::

    [project.entry-points."depthlab.tasks"]
    my_tasks = "my_package.tasks"

Every loaded file's absolute path is added to ``$DEPTHLAB_PLUGINS`` (paths joined by ``os.pathsep``), which
the CLI reads at start-up, so a ``depthlab`` started by this process (a subprocess, a re-run) loads the same
plugins. Ray workers unpickle runs: :func:`share_with_ray` makes Ray pickle plugin-file tasks by value (the class
travels with each run, the file need not exist on the worker); entry-point tasks travel by reference and need
their package installed on every node, as depthlab itself does.

Every failure is a ``UserError`` of one line naming the plugin and what went wrong: when it loads, and when its
code runs. A plugin file's task classes are guarded (:func:`guard`): what ``sample`` and ``enumerate`` return is
checked before depthlab uses it (a Batch of the task's shapes, token ids in the vocabulary, targets among the
labels), and anything they raise is a :class:`PluginError` naming the file, the task and the method, exit code 2.
What a plugin prints (on import, or while its code runs, in any thread) goes to stderr, so ``--json`` stays one
line; a thread plugin code starts is a daemon (it cannot keep the command alive after its result). ``os._exit``
called by plugin code is refused with a PluginError (depthlab replaces ``os._exit`` with a
function that ends the process as before unless the calling thread is running plugin code); a plugin that ends
the process another way (``posix._exit``, a signal, ctypes) cannot be stopped by any check inside the process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from .bounded import MAX_TEXT_BYTES, open_regular
from .errors import UserError
from .models import MODELS
from .tasks import TASKS, Task
from .tasks.base import Batch

TASK_ATTRIBUTES = ("section", "summary")  # besides name: what `depthlab tasks` and every table show
TASK_MEMBERS = ("vocab", "labels", "seq_len", "chance", "sample", "dataset_size", "enumerate")
ENV = "DEPTHLAB_PLUGINS"
ENTRY_POINT_GROUP = "depthlab.tasks"
LOADED: dict[Path, ModuleType] = {}  # plugin files loaded in this process, by absolute path


GUARDED = ("sample", "enumerate")  # the task methods whose output depthlab trains on
_RUNNING = threading.local()  # .label: the plugin code this thread is running (see running_plugin)
_REAL_EXIT = os._exit
_REAL_START = threading.Thread.start


class PluginError(UserError, ValueError):
    """Plugin code that failed or returned what a task may not: the message names the file, the task, the method."""


def _exit_guard(code: int) -> None:
    """``os._exit`` while plugins are loaded: refused in a thread running plugin code, the real one elsewhere."""
    label = getattr(_RUNNING, "label", None)
    if label is not None:
        raise PluginError(f"{label}: called os._exit({code}), which would end depthlab without a word; raise an "
                          f"exception instead")
    _REAL_EXIT(code)


class _PluginStdout:
    """stdout while plugins are loaded: what a thread running plugin code writes goes to stderr instead (everything
    else, ``isatty``, ``fileno``, ``buffer`` included, is the real stdout's)."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, text: str) -> int:
        return (sys.stderr if getattr(_RUNNING, "label", None) else self.out).write(text)

    def flush(self) -> None:
        self.out.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.out, name)


def _start_guard(thread: threading.Thread) -> None:
    """``Thread.start`` while plugins are loaded: a thread that plugin code starts is made a daemon, so it cannot
    keep depthlab alive once the command's result is out (a non-daemon one did, for as long as it ran), and it
    runs as that plugin's code (its prints go to stderr)."""
    label = getattr(_RUNNING, "label", None)
    if label is not None:
        thread.daemon = True
        run = thread.run

        def run_as_plugin() -> None:
            with running_plugin(label):
                run()

        thread.run = run_as_plugin  # type: ignore[method-assign]
    _REAL_START(thread)


def _install_guards() -> None:
    os._exit = _exit_guard
    threading.Thread.start = _start_guard  # type: ignore[method-assign]
    if not isinstance(sys.stdout, _PluginStdout) and sys.stdout is not None:
        sys.stdout = _PluginStdout(sys.stdout)


@contextlib.contextmanager
def running_plugin(label: str) -> Iterator[None]:
    """Mark this thread as running the plugin code ``label`` names (its prints go to stderr, os._exit is refused)."""
    outer = getattr(_RUNNING, "label", None)
    _RUNNING.label = label
    try:
        yield
    finally:
        _RUNNING.label = outer


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _where(error: BaseException, path: Path | None) -> str:
    """``line N: `` of the innermost frame in the plugin file (or of a syntax error in it), else nothing."""
    if path is None:
        return ""
    if isinstance(error, SyntaxError) and error.lineno and Path(error.filename or "").resolve() == path:
        return f"line {error.lineno}: "
    line, tb = None, error.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"line {line}: " if line else ""


def _restore(registry: dict[str, Any], before: dict[str, Any]) -> None:
    registry.clear()
    registry.update(before)


class _Refused(Exception):
    """A plugin registered what it may not: a name already taken, or an incomplete task."""


def _new_names(before_tasks: dict[str, Any], before_models: dict[str, Any], module: str | None) -> list[str]:
    """Task and model names registered since ``before_*``; _Refused for a taken name (unless taken by an
    earlier load of the same ``module``) or a task that lacks part of the interface."""
    for registry, before, kind in ((TASKS, before_tasks, "task"), (MODELS, before_models, "model")):
        taken = [n for n in registry if n in before and registry[n] is not before[n]
                 and before[n].__module__ != module]
        if taken:
            raise _Refused(f"{kind} name {taken[0]!r} is already taken by {before[taken[0]].__module__}; "
                           f"give the class another `name`")
    new_tasks = [n for n in TASKS if TASKS[n] is not before_tasks.get(n)]
    for name in new_tasks:
        problem = _incomplete(TASKS[name])
        if problem:
            raise _Refused(f"task {name!r} ({TASKS[name].__name__}) {problem}")
    return new_tasks + [n for n in MODELS if MODELS[n] is not before_models.get(n)]


def _registering(label: str, load: Callable[[], Any], path: Path | None = None, module: str | None = None) -> list[str]:
    """Run ``load()`` and return the names it registered; on any failure undo its registrations and raise a
    one-line UserError (with the line of ``path`` where it failed, when there is one)."""
    before_tasks, before_models = dict(TASKS), dict(MODELS)
    try:
        load()
        return _new_names(before_tasks, before_models, module)
    except (Exception, SystemExit) as e:  # a plugin that calls sys.exit() has failed to load, too
        _restore(TASKS, before_tasks)
        _restore(MODELS, before_models)
        if isinstance(e, _Refused):
            detail = str(e)
        elif isinstance(e, PluginError):  # os._exit while it was imported
            detail = f"{_where(e, path)}{str(e).removeprefix(f'{label}: ')}"
        else:
            detail = f"{_where(e, path)}{_one_line(e)}"
        raise UserError(f"{label}: {detail}") from None


def _incomplete(cls: type[Task]) -> str | None:
    """What a registered task class lacks of the interface (``depthlab.tasks.base``), or None."""
    for attribute in TASK_ATTRIBUTES:
        if not isinstance(getattr(cls, attribute, None), str):
            return f"has no {attribute} (a class attribute: text, e.g. {attribute} = \"…\")"
    missing = [m for m in TASK_MEMBERS if getattr(cls, m) is getattr(Task, m)]
    if missing:
        return f"does not define {', '.join(missing)} (see depthlab.tasks.base)"
    return None


def guard(cls: type[Task], path: Path) -> None:
    """Wrap ``cls.sample`` and ``cls.enumerate`` (a task class of the plugin file ``path``): what they return is
    checked (:func:`batch_problem`) and what they raise becomes a PluginError naming the file, task and method."""
    cls.plugin_file = str(path)  # what config's messages name when the task's own checks refuse it
    for method in GUARDED:
        original = getattr(cls, method)
        if not getattr(original, "plugin_guarded", False):
            setattr(cls, method, _guarded(original, method, f"plugin {path}: task {cls.name}", path))


def _guarded(original: Callable[..., Any], method: str, label: str, path: Path) -> Callable[..., Any]:
    @functools.wraps(original)
    def checked(self: Task, *args: Any, **kwargs: Any) -> Any:
        with running_plugin(f"{label}: {method}"):
            try:
                out = original(self, *args, **kwargs)
            except (KeyboardInterrupt, PluginError):
                raise
            except BaseException as e:  # SystemExit too: a plugin must not end the command
                raise PluginError(f"{label}: {method} raised {_where(e, path)}{_one_line(e)}") from None
        asked = kwargs.get("n", args[0] if args else None) if method == "sample" else None
        problem = batch_problem(self, out, asked)
        if problem:
            raise PluginError(f"{label}: {method} returned {problem}")
        return out

    checked.plugin_guarded = True  # type: ignore[attr-defined]
    return checked


def _outside(values: np.ndarray, size: int) -> int | None:
    """The first value of ``values`` outside ``range(size)``, else None."""
    if not values.size:
        return None
    low, high = values.min(), values.max()
    return None if low >= 0 and high < size else int(low if low < 0 else high)


def batch_problem(task: Task, out: Any, asked: Any = None) -> str | None:
    """What is wrong with ``out`` as examples of ``task`` (a Batch, the task's shapes, token ids within its
    vocabulary, class targets within its labels), in words; None when nothing is (``enumerate`` may give None)."""
    if out is None and asked is None:
        return None
    if not isinstance(out, Batch):
        return f"a {type(out).__name__}, not a depthlab.tasks.base.Batch"
    inputs, targets = np.asarray(out.inputs), np.asarray(out.targets)
    n = len(inputs) if inputs.ndim else 0
    if isinstance(asked, int) and n != asked:
        return f"{n} examples, {asked} were asked for"
    if targets.shape[:1] != (n,):
        return f"targets of shape {list(targets.shape)} for {n} examples"
    if task.input_dim:
        if inputs.shape != (n, task.seq_len, task.input_dim) or not np.issubdtype(inputs.dtype, np.floating):
            return (f"inputs of shape {list(inputs.shape)} ({inputs.dtype}); the task needs floats of shape "
                    f"[{n}, {task.seq_len}, {task.input_dim}] (n, seq_len, input_dim)")
    else:
        if inputs.shape != (n, task.seq_len) or not np.issubdtype(inputs.dtype, np.integer):
            return (f"inputs of shape {list(inputs.shape)} ({inputs.dtype}); the task needs token ids of shape "
                    f"[{n}, {task.seq_len}] (n, seq_len)")
        bad = _outside(inputs, task.vocab_size)
        if bad is not None:
            return f"token id {bad}, outside its vocabulary of {task.vocab_size} (ids 0 to {task.vocab_size - 1})"
    if task.loss == "cross_entropy":
        positions = task.read_positions
        shape = (n,) if positions is None else (n, len(positions))
        if targets.shape != shape or not np.issubdtype(targets.dtype, np.integer):
            return f"targets of shape {list(targets.shape)} ({targets.dtype}); the task needs class ids of shape " \
                   f"{list(shape)}"
        bad = _outside(targets, task.n_outputs)
        if bad is not None:
            return f"target {bad}, outside its {task.n_outputs} labels (ids 0 to {task.n_outputs - 1})"
    return None


def load_plugin_file(path: str | Path) -> list[str]:
    """Import the Python file ``path`` (once per process); returns the task (and model) names it registered."""
    label = f"--plugin {path}"
    try:
        resolved = Path(path).expanduser().resolve()
    except (RuntimeError, OSError) as e:  # a symlink loop, ~nosuchuser
        raise UserError(f"{label}: cannot find the file ({e}); give the path of a .py file") from None
    if resolved in LOADED:
        return []
    if not resolved.exists():
        relative = "" if Path(path).expanduser().is_absolute() else f", relative to the current folder {Path.cwd()}"
        raise UserError(f"{label}: no such file {resolved} (the path is read as given{relative}; give the path of "
                        f"a .py file that defines a task)")
    with open_regular(resolved, label, MAX_TEXT_BYTES):  # a regular file of at most 1 MiB (not a FIFO, a device)
        pass
    if resolved.suffix != ".py":
        raise UserError(f"{label}: must be a Python file ending in .py")
    # a stable module name per path: the same file gives the same module name in every process that loads it
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    module_name = f"depthlab_plugin_{''.join(c if c.isalnum() else '_' for c in resolved.stem)}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise UserError(f"{label}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    _install_guards()
    try:
        with running_plugin(label):
            names = _registering(label, lambda: spec.loader.exec_module(module), resolved, module_name)
        if not names:
            raise UserError(f"{label}: defines no task; decorate a Task subclass with @register "
                            f"(from depthlab.tasks.base import Task, register)")
    except UserError:
        sys.modules.pop(module_name, None)
        raise
    LOADED[resolved] = module
    for name in names:
        if name in TASKS and TASKS[name].__module__ == module_name:
            guard(TASKS[name], resolved)
    recorded = _recorded()
    if str(resolved) not in recorded:
        os.environ[ENV] = os.pathsep.join([*recorded, str(resolved)])
    return names


def blame(error: BaseException) -> str | None:
    """``plugin FILE: line N: Type: message`` when ``error`` was raised in the code of a loaded plugin file (wherever
    depthlab called it from), else None: what the CLI says instead of an internal error."""
    for path in LOADED:
        where = _where(error, path)
        if where:
            return f"plugin {path}: {where}{_one_line(error)}"
    return None


def _recorded() -> list[str]:
    return [p for p in os.environ.get(ENV, "").split(os.pathsep) if p]


def load_entry_points() -> list[str]:
    """Import every module installed under the ``depthlab.tasks`` entry-point group; the names registered."""
    names: list[str] = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(point.dist, "name", None)
        label = f"entry point {point.name} = {point.value}" + (f" (package {dist})" if dist else "")
        names += _registering(label, point.load)
    return names


def load_plugins(paths: list[str | Path] | None = None) -> list[str]:
    """Entry points, then the files of ``$DEPTHLAB_PLUGINS``, then ``paths``; the names they registered."""
    names = load_entry_points()
    for path in [*_recorded(), *(paths or [])]:
        names += load_plugin_file(path)
    return names


def share_with_ray() -> None:
    """Make Ray pickle the plugin files' classes by value, so its workers need not import the files."""
    if not LOADED:
        return
    import ray.cloudpickle  # Ray's own serializer (sends classes to workers; depthlab never unpickles files)

    for module in LOADED.values():
        ray.cloudpickle.register_pickle_by_value(module)
