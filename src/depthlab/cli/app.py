"""The one Typer app of ``depthlab``: its callback loads plugins and sets the memory budget before any command;
:func:`main` runs it inside the error boundary.

The boundary: a mistake (a config, an option, a store path, a size that does not fit) prints one line
``error: <field or option>: <what is allowed>`` to stderr and exits with code 2; an unexpected error prints one
line saying what failed and the file holding its traceback, and exits with code 1; Ctrl-C exits with 130.
Nothing reaches stdout on an error, so ``--json`` output is one JSON object or nothing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import UserError
from ..memory import ENV as MEMORY_ENV
from ..memory import memory_budget, parse_size
from ..secrets import redact

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="depthlab: what sequence models can learn, at which depth, and how.")

# Typer raises its parser's errors (bad values, unknown options or commands) from the click it runs on: its own
# copy since Typer 0.26, click itself before. Its public BadParameter derives from that click's UsageError.
USAGE_ERROR: type[Exception] = typer.BadParameter.__mro__[1]

PluginOpt = Annotated[list[Path] | None, typer.Option(
    "--plugin", help="a Python file defining tasks of your own (repeatable; also $DEPTHLAB_PLUGINS, and "
                     "entry points of the group depthlab.tasks)")]
MemoryOpt = Annotated[str | None, typer.Option(
    "--memory", help=f"memory depthlab may plan for: 16GiB, 512M, or off (no size checks); default: what the "
                     f"machine has available (also ${MEMORY_ENV})")]


@app.callback()
def _setup(plugin: PluginOpt = None, memory: MemoryOpt = None) -> None:
    from ..plugins import load_plugins

    if memory is not None:
        try:
            parse_size(memory)
        except ValueError as e:
            raise UserError(f"--memory: {e}") from None
        os.environ[MEMORY_ENV] = memory  # read by every size check, in this process and the ones it starts
    load_plugins(plugin)


def _one_line(text: str) -> str:
    return " ".join(text.split()) if "\n" in text or "\r" in text else text


def _usage_message(error: Exception) -> str | None:
    """The one line for a usage error; None for a command given nothing, whose help Typer has shown."""
    message, ctx = error.format_message(), getattr(error, "ctx", None)
    if type(error).__name__ == "NoArgsIsHelpError":
        if message:  # plain Typer (no rich) returns the help instead of printing it
            print(message)
        return None
    command = ctx.command_path if ctx is not None else "depthlab"
    if message.startswith("No such command") and ctx is not None and hasattr(ctx.command, "list_commands"):
        message = f"{message.rstrip('.')}; allowed: {', '.join(ctx.command.list_commands(ctx))}"
    return f"{_one_line(message)} (see `{command} --help`)"


def _internal_error(error: BaseException) -> str:
    """The one line for an unexpected error; its traceback goes to a file whose path the line gives."""
    what = " ".join(str(error).split())[:200]
    line = f"internal error: {type(error).__name__}{': ' + what if what else ''}"
    try:
        with tempfile.NamedTemporaryFile("w", prefix="depthlab-error-", suffix=".txt", delete=False) as f:
            f.write(redact(f"depthlab {' '.join(sys.argv[1:])}\n\n" + "".join(traceback.format_exception(error))))
    except OSError as e:
        return f"{line} (its traceback could not be written to {tempfile.gettempdir()}: {e.strerror})"
    return f"{line} (the traceback is in {f.name}; please report it with that file)"


@functools.cache
def command() -> typer.main.TyperGroup:
    """The app as the click command Typer builds from it (once per process: building it takes 50 ms)."""
    return typer.main.get_command(app)


def _out_of_gpu_memory(error: Exception) -> bool:
    """CUDA's out-of-memory error (torch's own class; if torch was never imported, it cannot be one)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(error, getattr(torch, "OutOfMemoryError", ()))


GPU_FACTS_LIMIT = 400  # characters of PyTorch's out-of-memory message kept, in whole sentences


def _gpu_memory_facts(message: str) -> str:
    """The sentences of PyTorch's CUDA out-of-memory message that give numbers (asked for, capacity, free, in
    use, allocated and reserved), whole, within GPU_FACTS_LIMIT characters; its advice and link left out."""
    sentences = re.split(r"(?<=\.)\s+(?=[A-Z])", _one_line(message).strip())
    kept: list[str] = []
    for i, sentence in enumerate(sentences):
        if (i and not re.search(r"\d", sentence)) or len(" ".join([*kept, sentence])) > GPU_FACTS_LIMIT:
            continue
        kept.append(sentence)
    return " ".join(kept).rstrip(".") or "CUDA out of memory"


def _out_of_cpu_memory(error: Exception) -> bool:
    """PyTorch's CPU allocator failing (a RuntimeError, not a MemoryError: with ``DEPTHLAB_MEMORY=off``)."""
    return isinstance(error, RuntimeError) and "can't allocate memory" in str(error)


class StdoutError(UserError):
    """stdout could not take the output (a full disk or device behind it)."""


class _GuardedStdout:
    """stdout while a command runs: a write or flush that fails with an OSError (a full disk, ``/dev/full``) is a
    StdoutError naming the stream; a reader that went away stays a BrokenPipeError (handled on its own)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._stream, method)(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(f"stdout: cannot write the output ({e.strerror or e}); free space or redirect it "
                              f"elsewhere") from None

    def write(self, data: Any) -> Any:
        return self._call("write", data)

    def flush(self) -> None:
        self._call("flush")

    @property
    def buffer(self) -> _GuardedStdout:
        return _GuardedStdout(self._stream.buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _RedactedStderr:
    """stderr while a command runs: every write with the API key (``depthlab.secrets``) redacted, whoever writes
    it (a library's warning, a plugin, rich's console)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, data: str) -> int:
        self._stream.write(redact(data))
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _silence_stdout(failed: Any) -> None:
    """Point stdout at /dev/null: what the ``failed`` stream could not take must not fail again when Python flushes
    it at exit (the process's own stdout is redirected below Python too; any other stream is only replaced)."""
    if failed is sys.__stdout__:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), failed.fileno())
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (left open: Python flushes it at exit)


def main() -> None:
    """``depthlab``: run the app inside the error boundary (module docstring)."""
    from .common import OPENED, damage_notes, sane_columns

    OPENED.clear()
    sane_columns()  # again: $COLUMNS may have changed since common was imported (depthlab called in-process)
    if sys.stdout is None:  # started with stdout closed (`>&-`): results would be lost, or land in a file it opens
        print("error: stdout is closed; depthlab writes its results there: redirect it to a file or /dev/null",
              file=sys.stderr)
        raise SystemExit(2)
    for stream in (sys.stdout, sys.stderr):  # an encoding without a character (PYTHONIOENCODING=ascii): escaped
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    code: int | None
    stdout, sys.stdout = sys.stdout, _GuardedStdout(sys.stdout)
    stderr, sys.stderr = sys.stderr, _RedactedStderr(sys.stderr)
    try:
        # Without standalone mode, Typer returns the exit code of a command that exits (Ctrl-C becomes 130).
        code = command().main(prog_name="depthlab", standalone_mode=False)
        sys.stdout.flush()  # a stdout that cannot take the output fails here, inside the boundary
    except StdoutError as e:
        code, line = 2, str(e)
        _silence_stdout(stdout)
        stdout = sys.stdout
    except UserError as e:
        code, line = 2, _one_line(str(e))
    except USAGE_ERROR as e:
        code, line = 2, _usage_message(e)
    except MemoryError as e:
        code, line = 2, (f"out of memory{': ' + _one_line(str(e)) if str(e) else ''}; ask for smaller sizes, "
                         "or free memory")
    except (typer.Abort, KeyboardInterrupt):
        code, line = 130, None
    except typer.Exit as e:
        code, line = e.exit_code, None
    except BrokenPipeError:  # the reader of stdout went away (`depthlab runs | head`): nothing left to say
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (flushing stdout at exit would fail again)
        raise SystemExit(1) from None
    except OSError as e:
        if e.filename is None:
            code, line = 1, _internal_error(e)
        else:  # a path the command was given or writes to: its name and what the system said
            code, line = 2, f"{e.filename}: {e.strerror or e}"
    except Exception as e:
        from ..plugins import blame

        if _out_of_gpu_memory(e):
            code, line = 2, (f"out of GPU memory: {_gpu_memory_facts(str(e))}; ask for smaller sizes or fewer runs "
                             "at once (--group-size; bench: --runs)")
        elif _out_of_cpu_memory(e):
            unchecked = (" (with DEPTHLAB_MEMORY=off sizes are not checked before they are allocated)"
                         if memory_budget()[0] is None else "")  # said only when it is off
            code, line = 2, (f"out of memory: {_one_line(str(e)).partition('DefaultCPUAllocator: ')[2][:160]}; ask "
                             f"for smaller sizes, or free memory{unchecked}")
        elif blame(e):  # raised in a plugin's code: the plugin's error, not depthlab's
            code, line = 2, blame(e)
        else:
            code, line = 1, _internal_error(e)
    else:
        line = None
    sys.stdout = stdout  # as it was before the guard (and any wrapper a plugin put around it)
    sys.stderr = stderr
    for note in damage_notes():  # rows a store left out, named even when the command could work without them
        print(redact(f"warning: {note}"), file=sys.stderr)
    if line:
        print(redact(f"error: {line}"), file=sys.stderr)
    if code == 130:
        from ..plugin_guards import interruption

        where = interruption()  # plugin code that raised KeyboardInterrupt: named
        print(f"interrupted{': ' if where else ''}{where or ''}", file=sys.stderr)
    if isinstance(code, int) and code:
        raise SystemExit(code)
