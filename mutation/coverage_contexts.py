"""A pytest plugin for ``mutation/select.py``: each test's lines recorded under its node id, and its time.

Coverage.py's own ``dynamic_context = test_function`` names a test by its function, which merges a parametrized
test's cases; this names each case by its pytest node id, as pytest-cov's ``--cov-context=test`` does. Lines run
while pytest collects (module imports, a module's constants, the ``def`` lines) stay in the empty context.
"""

from __future__ import annotations

import json
import os
import time

import coverage
import pytest

DURATIONS: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(item.nodeid)
    started = time.perf_counter()
    yield
    DURATIONS[item.nodeid] = round(time.perf_counter() - started, 3)
    if cov is not None:
        cov.switch_context("")


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("DEPTHLAB_TEST_DURATIONS")
    if path:
        with open(path, "w") as f:
            json.dump(DURATIONS, f, indent=0, sort_keys=True)
