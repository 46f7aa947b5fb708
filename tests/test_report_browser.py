"""The HTML report in a real browser: headless Chromium (Debian's package) driven by Playwright's Python package.

The report is built from a small real sweep; the page must load with no console error, no failed request and
no request at all beyond its own file; the heat map must have one cell per (task, depth) in the store with the
store's accuracy in its tooltip; a click on a cell must show that cell's runs with their curves and attention
maps; markup in a task's name must stay text; the figures must download as SVG and PNG.

Skipped (with the reason) only when Chromium or Playwright is missing: ``make test`` installs both.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch

from depthlab.analysis.runs import load_run, sample_examples
from depthlab.report.html import build_report
from depthlab.store import Store

CHROMIUM = os.environ.get("DEPTHLAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]
EXAMPLES = 2

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

pytestmark = [
    pytest.mark.skipif(sync_playwright is None,
                       reason="Playwright's Python package is missing: pip install 'depthlab[test]' (make test does)"),
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"Chromium is missing at {CHROMIUM}: apt-get install chromium (make test does)"),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from test_report import EVIL, add_foreign_run, tiny_sweep

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("browser")
    store = tiny_sweep(root / "store")
    evil = add_foreign_run(store)
    out = root / "report.html"
    build_report(store, out, examples=EXAMPLES)
    return store, out, evil, EVIL


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield browser
        browser.close()


class Watched:
    """A page with every console error, page error, request and failed request recorded."""

    def __init__(self, browser, url: str) -> None:
        self.context = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.failed: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url}: {r.failure}"))
        self.url = url
        self.page.goto(url)
        self.page.wait_for_load_state("load")

    def check_clean(self) -> None:
        assert self.errors == [], self.errors
        assert self.failed == [], self.failed
        # Nothing but the file itself (downloads are made in the page from data: and blob: URLs).
        others = [u for u in self.requests if u != self.url and not u.startswith(("data:", "blob:"))]
        assert others == [], others

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(browser, built):
    watched = Watched(browser, built[1].as_uri())
    yield watched
    watched.close()


def expected_cells(store: Store) -> dict[tuple[str, int], list[dict]]:
    """(task, depth) -> the store's runs of it, read straight from the store."""
    cells: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for run in store.find_runs():
        cells[(run["task"], run["config"]["model"]["layers"])].append(run)
    return cells


def test_heat_map_has_one_cell_per_task_and_depth_with_its_accuracy(page, built):
    store, *_ = built
    expected = expected_cells(store)
    cells = page.page.locator("a.cell")
    found = [(cells.nth(i).get_attribute("data-task"), int(cells.nth(i).get_attribute("data-layers")))
             for i in range(cells.count())]
    assert sorted(found) == sorted(expected)  # exactly one cell each, no more
    for (task, depth), runs in expected.items():
        cell = page.page.locator(f'a.cell[data-layers="{depth}"]').filter(
            has=page.page.locator("xpath=self::*[@data-task=" + json.dumps(task) + "]"))
        assert cell.count() == 1
        cell.hover()
        tip = page.page.locator("#tip")
        tip.wait_for(state="visible")
        accuracy = np.mean([r["final"]["accuracy"] for r in runs if r["status"] == "done"])
        text = tip.inner_text()
        assert f"accuracy {accuracy:.3f}" in text, text
        for run in runs:
            assert run["id"] in text
    page.check_clean()


def test_click_cell_shows_its_runs_curves_and_attention(page, built):
    store, *_ = built
    runs = expected_cells(store)[("icqa", 2)]
    page.page.locator('a.cell[data-task="icqa"][data-layers="2"]').click()
    panel = page.page.locator("#selection")
    panel.wait_for(state="visible")
    assert "icqa × 2 layers" in panel.locator("h3").inner_text()
    assert page.page.evaluate("location.hash").startswith("#cell=")
    # the group's curves: every seed, their mean and band
    assert panel.locator(".cell-curves svg polyline").count() >= 2 * (len(runs) + 1)
    task = load_run(store, runs[0]["id"]).task
    batch = sample_examples(task, EXAMPLES, seed=0)
    for run in runs:
        detail = panel.locator(f'.run-detail[data-run="{run["id"]}"]')
        assert detail.count() == 1
        assert run["id"] in detail.locator("h4").inner_text()
        # its curves: eval and train accuracy, eval and train loss
        assert detail.locator(".run-curves svg polyline").count() == 4
        # its attention maps: one figure per example, a panel per layer and head, tokens on both axes
        figures = detail.locator("svg.attention")
        assert figures.count() == EXAMPLES
        for i in range(EXAMPLES):
            heads = figures.nth(i).locator("g.head")
            assert heads.count() == 2  # 2 layers × 1 head
            tokens = [task.vocab[t] for t in batch.inputs[i]]
            for h in range(heads.count()):
                assert heads.nth(h).locator("text.qtok").all_text_contents() == tokens
                assert heads.nth(h).locator("text.ktok").all_text_contents() == tokens
                assert heads.nth(h).locator("rect").count() == len(tokens) ** 2
    # values on hover
    square = panel.locator("svg.attention g.head rect").nth(5)
    square.hover()
    assert "attention " in page.page.locator("#tip").inner_text()
    # another cell replaces the selection
    page.page.locator('a.cell[data-task="memorization"][data-layers="1"]').click()
    page.page.wait_for_function("document.querySelector('#selection h3').textContent.includes('memorization')")
    assert panel.locator(".run-detail").count() == len(expected_cells(store)[("memorization", 1)])
    page.check_clean()


def test_run_link_and_escaped_markup(page, built):
    store, _, evil_id, evil = built
    # a task name with markup is shown as text and never runs
    assert page.page.evaluate("window.__pwned") is None
    assert page.page.evaluate("document.scripts.length") == 2
    labels = page.page.locator("svg text").all_text_contents()
    assert evil in labels
    assert evil in page.page.locator("#all-runs").inner_text()
    # a run id in the runs table opens that run; a run without a checkpoint says so
    page.page.locator(f'#all-runs a[href="#run={evil_id}"]').click()
    panel = page.page.locator("#selection")
    panel.wait_for(state="visible")
    assert evil_id in panel.locator("h3").inner_text()
    assert "is not loaded in this depthlab" in panel.locator(".attention-note").inner_text()
    other = store.find_runs(task="icqa")[0]["id"]
    page.page.locator(f'#all-runs a[href="#run={other}"]').click()
    page.page.wait_for_function(f"document.querySelector('#selection h3').textContent.includes('{other}')")
    assert panel.locator("svg.attention").count() == EXAMPLES
    page.check_clean()


def test_figures_download_as_svg_and_png(page, built, tmp_path):
    heatmap = page.page.locator("#sec-capability figure.fig").first
    with page.page.expect_download() as info:
        heatmap.locator('button[data-dl="svg"]').click()
    svg = Path(info.value.path()).read_text()
    assert info.value.suggested_filename.endswith(".svg")
    assert svg.startswith("<?xml") and "<svg" in svg and 'xmlns="http://www.w3.org/2000/svg"' in svg
    with page.page.expect_download() as info:
        heatmap.locator('button[data-dl="png"]').click()
    assert info.value.suggested_filename.endswith(".png")
    assert Path(info.value.path()).read_bytes().startswith(b"\x89PNG")
    # a figure drawn by the page's script (attention) downloads too
    slot = page.page.locator(".attn-slot figure.fig").first
    with page.page.expect_download() as info:
        slot.locator('button[data-dl="png"]').click()
    assert Path(info.value.path()).read_bytes().startswith(b"\x89PNG")
    page.check_clean()
