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

import functools
import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from .bounded import MAX_TEXT_BYTES, open_regular
from .errors import UserError
from .plugin_guards import (
    PluginError,
    PluginInterrupt,
    install_guards,
    running_plugin,
    stdout_descriptor_to_stderr,
)
from .tasks import TASKS, Task
from .tasks.base import MAX_VOCABULARY, Batch

TASK_ATTRIBUTES = ("section", "summary")  # besides name: what `depthlab tasks` and every table show
TASK_MEMBERS = ("vocab", "labels", "seq_len", "chance", "sample", "dataset_size", "enumerate")
ENV = "DEPTHLAB_PLUGINS"
ENTRY_POINT_GROUP = "depthlab.tasks"
LOADED: dict[Path, ModuleType] = {}  # plugin files loaded in this process, by absolute path


GUARDED = ("sample", "enumerate")  # the task methods whose output depthlab trains on
CHECKED = ("vocab", "labels", "seq_len", "chance")  # the task properties checked each time depthlab reads them
LOSSES = ("cross_entropy", "mse", "bce", "bce_balanced")  # what depthlab.training.objectives computes

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


def _model_families() -> dict[str, Any]:
    """The model registry, imported when a plugin loads (a plugin may register families; importing them imports
    torch, which commands that load no plugin, such as ``depthlab tasks``, never need)."""
    from .models import MODELS

    return MODELS


def _new_names(before_tasks: dict[str, Any], before_models: dict[str, Any], module: str | None) -> list[str]:
    """Task and model names registered since ``before_*``; _Refused for a taken name (unless taken by an
    earlier load of the same ``module``) or a task that lacks part of the interface."""
    models = _model_families()
    for registry, before, kind in ((TASKS, before_tasks, "task"), (models, before_models, "model")):
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
    return new_tasks + [n for n in models if models[n] is not before_models.get(n)]


def _registering(label: str, load: Callable[[], Any], path: Path | None = None, module: str | None = None) -> list[str]:
    """Run ``load()`` and return the names it registered; on any failure undo its registrations and raise a
    one-line UserError (with the line of ``path`` where it failed, when there is one)."""
    models = _model_families()
    before_tasks, before_models = dict(TASKS), dict(models)
    try:
        load()
        return _new_names(before_tasks, before_models, module)
    except (Exception, SystemExit) as e:  # a plugin that calls sys.exit() has failed to load, too
        _restore(TASKS, before_tasks)
        _restore(models, before_models)
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
    """Wrap the members of a task class of the plugin file ``path``: what ``sample`` and ``enumerate`` return is
    checked (:func:`batch_problem`, and ``enumerate`` against ``dataset_size``), and so is each value of ``vocab``,
    ``labels``, ``seq_len``, ``chance`` and ``dataset_size`` (:func:`member_problem`); what they raise becomes a
    PluginError naming the file, task and member. ``loss`` is checked here, at load."""
    label = f"plugin {path}: task {cls.name}"
    if not isinstance(cls.loss, str) or cls.loss not in LOSSES:
        raise PluginError(f"{label}: loss is {str(cls.loss)[:40]!r}; allowed: {', '.join(LOSSES)}")
    cls.plugin_file = str(path)  # what config's messages name when the task's own checks refuse it
    for method in GUARDED:
        original = getattr(cls, method)
        if not getattr(original, "plugin_guarded", False):
            setattr(cls, method, _guarded(original, method, label, path))
    for name in CHECKED:
        member = cls.__dict__.get(name)
        if isinstance(member, property) and member.fget and not getattr(member.fget, "plugin_guarded", False):
            setattr(cls, name, property(_checked(member.fget, name, label, path)))
    if not getattr(cls.dataset_size, "plugin_guarded", False):
        cls.dataset_size = _checked(cls.dataset_size, "dataset_size", label, path)


def _run_plugin_code(code: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], label: str,
                     path: Path) -> Any:
    """``code(*args, **kwargs)`` as plugin code: what it raises becomes a PluginError naming ``label`` (a
    KeyboardInterrupt, Ctrl-C or the plugin's own, stays an interruption, exit 130, named)."""
    with running_plugin(label):
        try:
            return code(*args, **kwargs)
        except PluginError:
            raise
        except KeyboardInterrupt as e:
            raise PluginInterrupt(f"{label} was interrupted {_where(e, path)}".rstrip(": ")) from None
        except BaseException as e:  # SystemExit too: a plugin must not end the command
            raise PluginError(f"{label} raised {_where(e, path)}{_one_line(e)}") from None


def _checked(original: Callable[..., Any], member: str, label: str, path: Path) -> Callable[..., Any]:
    """``original`` (a property's getter or ``dataset_size``) run as plugin code, its value checked."""

    @functools.wraps(original)
    def checked(self: Task, *args: Any, **kwargs: Any) -> Any:
        value = _run_plugin_code(original, (self, *args), kwargs, f"{label}: {member}", path)
        problem = member_problem(member, value)
        if problem:
            raise PluginError(f"{label}: {member} {problem}")
        return value

    checked.plugin_guarded = True  # type: ignore[attr-defined]
    return checked


def _whole(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def member_problem(member: str, value: Any) -> str | None:
    """What is wrong with ``value`` as the task member ``member``, in words; None when nothing is."""
    if member in ("vocab", "labels"):
        if not isinstance(value, list | tuple):
            return f"is {_shown(value)}; it must be a list of names (text)"
        if len(value) > MAX_VOCABULARY:  # counted before each name is looked at: 3,000,000 labels fail at once
            return f"has {len(value):,} names, more than the {MAX_VOCABULARY:,} a task may have"
        if not all(isinstance(v, str) for v in value):
            return f"is {_shown(value)}; it must be a list of names (text)"
    elif member in ("seq_len", "dataset_size"):
        if not _whole(value) or value < (1 if member == "seq_len" else 0):
            least = "1 or more" if member == "seq_len" else "0 or more"
            return f"is {_shown(value)}; it must be a whole number, {least}"
    elif member == "chance" and (isinstance(value, bool) or not isinstance(value, int | float | np.number)
                                 or not 0 <= float(value) <= 1):
        return f"is {_shown(value)}; it must be a number from 0 to 1"
    return None


def _shown(value: Any) -> str:
    return f"{str(value)[:40]!r} ({type(value).__name__})"


def _guarded(original: Callable[..., Any], method: str, label: str, path: Path) -> Callable[..., Any]:
    @functools.wraps(original)
    def checked(self: Task, *args: Any, **kwargs: Any) -> Any:
        out = _run_plugin_code(original, (self, *args), kwargs, f"{label}: {method}", path)
        asked = kwargs.get("n", args[0] if args else None) if method == "sample" else None
        problem = batch_problem(self, out, asked)
        if problem is None and method == "enumerate" and out is not None:
            split = kwargs.get("split", args[0] if args else "eval")
            size = self.dataset_size(split)
            if len(out.inputs) != size:
                problem = f"{len(out.inputs):,} examples, while dataset_size({split!r}) says {size:,}"
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
    for part, array in (("inputs", out.inputs), ("targets", out.targets)):
        if not isinstance(array, np.ndarray):  # a torch tensor (on the CPU, a GPU or the meta device), a list
            return f"{part} as a {type(array).__module__}.{type(array).__name__}, not a numpy array"
    inputs, targets = out.inputs, out.targets
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
    else:  # mse, bce: float targets of the model's output shape, a value per label
        positions = task.read_positions
        shape = (n, task.n_outputs) if positions is None else (n, len(positions), task.n_outputs)
        if targets.shape != shape or not np.issubdtype(targets.dtype, np.number):
            return f"targets of shape {list(targets.shape)} ({targets.dtype}); a {task.loss} task needs numbers of " \
                   f"shape {list(shape)} (the model's outputs: a value per label)"
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
    install_guards()
    try:
        with running_plugin(label), stdout_descriptor_to_stderr():
            names = _registering(label, lambda: spec.loader.exec_module(module), resolved, module_name)
        if not names:
            raise UserError(f"{label}: defines no task; decorate a Task subclass with @register "
                            f"(from depthlab.tasks.base import Task, register)")
    except UserError:
        sys.modules.pop(module_name, None)
        raise
    try:
        for name in names:
            if name in TASKS and TASKS[name].__module__ == module_name:
                guard(TASKS[name], resolved)
                _check_defaults(TASKS[name])
    except UserError:
        _restore(TASKS, {n: t for n, t in TASKS.items() if t.__module__ != module_name})
        sys.modules.pop(module_name, None)
        raise
    LOADED[resolved] = module
    recorded = _recorded()
    if str(resolved) not in recorded:
        os.environ[ENV] = os.pathsep.join([*recorded, str(resolved)])
    return names


def _check_defaults(cls: type[Task]) -> None:
    """The checked members of a task built with its defaults, read once at load (a task whose fields have no
    defaults is checked at first use instead)."""
    try:
        task = cls()
    except PluginError:
        raise
    except Exception:  # fields without defaults, or defaults its own validators refuse: checked when configured
        return
    for member in CHECKED:
        getattr(task, member)
    task.dataset_size("eval")


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
