"""The report's gallery: a section per seed with each figure ``depthlab reproduce`` drew into the store, embedded,
beside the seed's own caption; what is not in the store yet, with its command; a store of figures and no runs
(seed003-widths) still gets a report; a report of a plain sweep has no gallery. The page is opened in Chromium
too (skipped, as tests/test_report_browser.py, where Chromium or Playwright is missing)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from depthlab.captions import CAPTIONS
from depthlab.cli import app
from depthlab.draw import save
from depthlab.draw.style import new_figure
from depthlab.errors import UserError
from depthlab.report.html import build_report
from depthlab.store import Store, record_reproduction

runner = CliRunner()
SMALL = ["--set", "train.steps=10", "--set", "train.eval_every=5", "--set", "sweep.seed=[0]",
         "--set", "sweep.model.layers=[1]"]


def png(path: Path) -> Path:
    with new_figure(figsize=(2, 1.5)) as fig:
        fig.subplots().plot([0, 1], [0, 1])
    return save(fig, path)


@pytest.fixture(scope="module")
def store_root(tmp_path_factory) -> Path:
    """seed001-depth reproduced for real (10 steps, one seed, one depth) and a seed 003 manifest written by hand."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("gallery") / "store"
    result = runner.invoke(app, ["reproduce", "seed001-depth", "--store", str(root), "--json", *SMALL])
    assert result.exit_code == 0, result.output
    figure = png(root / "figures" / "seed003-widths-quick.png")
    record_reproduction(root, {"preset": "seed003-widths", "scale": "quick", "figures": ["seed 003 Theorem 1"],
                               "files": [str(figure), str(root / "figures" / "gone.png")],
                               "command": "depthlab reproduce seed003-widths --scale quick", "overrides": []})
    return root


def sections(html: str) -> dict[str, str]:
    return dict(re.findall(r'<section class="report-section" id="sec-([^"]+)">(.*?)</section>', html, re.S))


def test_a_page_per_seed_with_the_figures_beside_the_seed_caption(store_root, tmp_path):
    out = tmp_path / "report.html"
    with Store(store_root) as store:
        result = build_report(store, out, examples=0)
    assert result["sections"][:4] == ["seed-001", "seed-002", "seed-003", "seed-004"]
    html = out.read_text()
    parts = sections(html)
    seed1 = parts["seed-001"]
    card = re.search(r'<article class="gallery-item" id="fig-seed001-depth-quick".*?</article>', seed1, re.S).group(0)
    assert CAPTIONS["seed 001 Figure 2"].caption.split(". ")[0] in card
    assert '<blockquote class="seed-caption" data-figure="seed 001 Figure 2">' in card
    [data] = re.findall(r'src="data:image/png;base64,([^"]+)"', card)
    assert base64.b64decode(data) == (store_root / "figures" / "seed001-depth-quick.png").read_bytes()
    assert "--set train.steps=10" in card and "Changed from the preset" in card and "4 runs" in card
    assert '<a href="#fig-seed001-depth-quick">' in seed1  # the seed's own navigation
    todo = seed1.split("Not in this store yet")[1]  # every other preset of the seed, with its command
    assert f"depthlab reproduce seed001-min-depth --store {store_root}" in todo
    assert "depthlab reproduce seed001-depth " not in todo
    # seed 003: the hand-written manifest, its missing file, and the presets still to run
    seed3 = parts["seed-003"]
    assert "seed 003 Theorem 1" in seed3 and CAPTIONS["seed 003 Theorem 1"].caption[:40] in seed3
    assert "missing file" in seed3 and "gone.png" in seed3
    assert f"depthlab reproduce seed003-dyck --store {store_root}" in seed3
    # seed 002 and 004: nothing drawn yet; what no preset draws is named (seed 004: every item has a preset)
    assert "0 figure sets" in parts["seed-002"] and "depthlab reproduce seed002-layers" in parts["seed-002"]
    assert "No preset draws: " in parts["seed-002"] and "Figure 1" in parts["seed-002"]  # an illustration
    assert "depthlab reproduce seed004-hypotheses" in parts["seed-004"] and "No preset draws" not in parts["seed-004"]
    # the runs' own sections are still there, after the gallery
    assert {"capability", "curves", "runs"} <= set(result["sections"])
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html


def test_figures_without_runs_still_make_a_report(tmp_path):
    root = tmp_path / "store"
    Store(root).close()
    with Store(root) as store, pytest.raises(UserError, match="has no runs yet"):
        build_report(store, tmp_path / "r.html")
    record_reproduction(root, {"preset": "seed003-widths", "scale": "quick", "figures": ["seed 003 Lemma 2"],
                               "files": [str(png(root / "figures" / "w.png"))]})
    with Store(root) as store:
        result = build_report(store, tmp_path / "r.html")
    assert result["runs"] == 0 and result["sections"] == ["seed-001", "seed-002", "seed-003", "seed-004"]


def test_a_plain_sweep_has_no_gallery(tmp_path):
    from test_report import tiny_sweep

    torch.set_num_threads(1)
    store = tiny_sweep(tmp_path / "store", steps=10)
    result = build_report(store, tmp_path / "r.html", examples=0)
    assert not any(s.startswith("seed-") for s in result["sections"])


def test_cli_report_json_names_the_seed_sections(store_root, tmp_path):
    result = runner.invoke(app, ["report", "--store", str(store_root), "--out", str(tmp_path / "r.html"),
                                 "--examples", "0", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["sections"][:4] == ["seed-001", "seed-002", "seed-003", "seed-004"]


def test_gallery_in_a_browser(store_root, tmp_path):
    pytest.importorskip("playwright")
    from test_report_browser import ARGS, CHROMIUM, Watched

    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium is missing at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    out = tmp_path / "report.html"
    with Store(store_root) as store:
        build_report(store, out, examples=0)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = Watched(browser, out.as_uri())
        images = page.page.locator("#sec-seed-001 .gallery-item img")
        assert images.count() == 1
        assert page.page.evaluate("document.querySelector('#sec-seed-001 .gallery-item img').naturalWidth") > 100
        page.page.locator('#sec-seed-001 .seed-nav a').first.click()
        assert page.page.evaluate("location.hash") == "#fig-seed001-depth-quick"
        page.check_clean()
        page.close()
        browser.close()
