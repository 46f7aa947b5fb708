"""The process guards that keep a plugin's code from breaking a depthlab command (``depthlab.plugins`` installs them
when it loads the first plugin): what plugin code prints goes to stderr (``--json`` stays one line), ``os._exit`` and
every way to start a process whose output would reach depthlab's stdout or that would run the rest of depthlab
twice, called by plugin code, are refused with a :class:`PluginError` naming the plugin (``os.fork``,
``posix.fork``, ``os.forkpty``, ``os.system``, ``os.posix_spawn``, a ``multiprocessing`` process, a ``subprocess``
whose stdout is depthlab's), a thread it starts is a daemon that runs as that plugin's code, and file descriptor 1
points at stderr while a plugin file is imported."""

from __future__ import annotations

import contextlib
import functools
import multiprocessing.process
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .errors import UserError

_RUNNING = threading.local()  # .label: the plugin code this thread is running (see running_plugin)
_REAL_EXIT = os._exit
_REAL_START = threading.Thread.start
_REAL_POPEN = subprocess.Popen.__init__
_REAL_PROCESS_START = multiprocessing.process.BaseProcess.start
# what starts a process that runs the rest of depthlab twice (a fork) or writes to its stdout (a shell, a spawn):
# (module, name) -> its real function, for those this platform has
# name -> its real function (os's, which is posix's too), for those this platform has
_PROCESS_STARTERS = {name: getattr(os, name) for name in ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp")
                     if hasattr(os, name)}
_OS_MODULES = [module for module in (os, sys.modules.get("posix")) if module is not None]  # both name each one


class PluginError(UserError, ValueError):
    """Plugin code that failed or returned what a task may not: the message names the file, the task, the method."""


class PluginInterrupt(KeyboardInterrupt):
    """A KeyboardInterrupt raised while plugin code ran: still an interruption (exit 130), its message names the
    plugin file, the task and the method (and :func:`interruption` gives it to the CLI, which Typer's exit code
    130 leaves without the exception)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        _INTERRUPTED.append(message)


_INTERRUPTED: list[str] = []


def interruption() -> str | None:
    """Where plugin code was interrupted (the last :class:`PluginInterrupt` since the last call), or None."""
    last = _INTERRUPTED[-1] if _INTERRUPTED else None
    _INTERRUPTED.clear()
    return last


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


def _refused(what: str) -> None:
    """A PluginError when this thread runs plugin code: it called ``what``, which depthlab does not allow it."""
    label = getattr(_RUNNING, "label", None)
    if label is not None:
        raise PluginError(f"{label}: {what}, whose output would reach depthlab's stdout (and a fork would run the "
                          f"rest of depthlab twice); start processes with subprocess.run(..., stdout=subprocess.PIPE) "
                          f"or another stdout than depthlab's")


def _starter_guard(name: str) -> Callable[..., Any]:
    """``os.name`` (``os.fork``, ``os.system``, …) refused in plugin code, the real one elsewhere."""
    real = _PROCESS_STARTERS[name]

    @functools.wraps(real)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _refused(f"called os.{name}()")
        return real(*args, **kwargs)

    return guarded


_STARTER_GUARDS = {name: _starter_guard(name) for name in _PROCESS_STARTERS}  # one object, os's and posix's: pickle
# finds ``posix.system`` by its name and wants that very object back


def _inherits_stdout(stdout: Any) -> bool:
    """Whether a child given ``stdout`` (Popen's argument) writes to depthlab's stdout (file descriptor 1)."""
    if stdout is None or stdout == 1:
        return True
    fileno = getattr(stdout, "fileno", None)
    try:
        return callable(fileno) and fileno() == 1
    except (OSError, ValueError):  # a closed file, or one without a descriptor (a BytesIO): Popen refuses it
        return False


def _popen_guard(self: subprocess.Popen, *args: Any, **kwargs: Any) -> None:
    """``subprocess.Popen`` (``run``, ``call``, ``check_output``, ``os.popen`` too) refused in plugin code when the
    child's stdout would be depthlab's."""
    stdout = kwargs["stdout"] if "stdout" in kwargs else (args[4] if len(args) > 4 else None)
    if _inherits_stdout(stdout):
        command = args[0] if args else kwargs.get("args")
        _refused(f"started the process {str(command)[:60]!r} with depthlab's stdout as its own")
    _REAL_POPEN(self, *args, **kwargs)


def _process_guard(process: multiprocessing.process.BaseProcess) -> None:
    """``multiprocessing``'s ``Process.start`` (pools and ``ProcessPoolExecutor`` start theirs with it) refused in
    plugin code: its child shares depthlab's stdout, and a forked one its state."""
    _refused(f"started a multiprocessing process ({process.name})")
    _REAL_PROCESS_START(process)


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


def install_guards() -> None:
    """Replace os._exit, the process starters (:data:`_PROCESS_STARTERS`, ``subprocess.Popen``, ``multiprocessing``'s
    ``Process.start``), Thread.start and sys.stdout by their guarded forms (idempotent)."""
    os._exit = _exit_guard
    for module in _OS_MODULES:
        for name, guarded in _STARTER_GUARDS.items():
            setattr(module, name, guarded)
    subprocess.Popen.__init__ = _popen_guard  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = _process_guard  # type: ignore[method-assign]
    threading.Thread.start = _start_guard  # type: ignore[method-assign]
    if not isinstance(sys.stdout, _PluginStdout) and sys.stdout is not None:
        sys.stdout = _PluginStdout(sys.stdout)


@contextlib.contextmanager
def stdout_descriptor_to_stderr() -> Iterator[None]:
    """File descriptor 1 pointed at stderr while a plugin file is imported: what it writes with ``os.write(1, …)``
    (past ``sys.stdout``) cannot reach ``--json``'s one line."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def running_plugin(label: str) -> Iterator[None]:
    """Mark this thread as running the plugin code ``label`` names (its prints go to stderr, os._exit is refused)."""
    outer = getattr(_RUNNING, "label", None)
    _RUNNING.label = label
    try:
        yield
    finally:
        _RUNNING.label = outer
