"""Screenshots of three pages of the built site (site/, `make docs`) in headless Chromium: the home page, a seed's
results page and the TransformerLens tutorial. Debian's Chromium, driven by Playwright (never `playwright install`):

    python docs/screenshots/take.py [SITE] [OUT]
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

PAGES = {"home": "index.html", "results-seed001": "results/seed001.html",
         "tutorial-transformerlens": "tutorials/transformerlens.html"}
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync"]


def main(site: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        for name, path in PAGES.items():
            page.goto((site / path).resolve().as_uri(), wait_until="load")
            page.wait_for_timeout(500)  # the theme's scripts lay out the navigation after load
            page.screenshot(path=str(out / f"{name}.png"))
        browser.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    main(Path(args[0]) if args else Path("site"), Path(args[1]) if len(args) > 1 else Path(__file__).parent)
