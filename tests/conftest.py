"""Shared fixtures."""

import pytest
import torch


@pytest.fixture
def one_thread():
    """Run a test with one torch thread (small float64 models: threads only add overhead), then restore."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run_depthlab(*args: str) -> tuple[int, str, str]:
    """``depthlab ARGS`` in this process through its real entry point (``depthlab.cli.main``, so its error
    boundary too): (exit code, stdout, stderr)."""
    import io
    import sys
    from contextlib import redirect_stderr, redirect_stdout
    from unittest import mock

    from depthlab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(sys, "argv", ["depthlab", *args]), redirect_stdout(out), redirect_stderr(err):
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def depthlab_main():
    """:func:`run_depthlab` as a fixture."""
    return run_depthlab


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` run only where PyTorch sees a CUDA GPU."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU (torch.cuda.is_available() is false)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
