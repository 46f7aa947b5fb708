"""The deliberate breakages of ``mutation/breakages.py`` still apply to today's code.

A breakage whose text has moved (the code it breaks was rewritten) is refused by the harness, so nobody learns
that the guarantee it checks went unchecked until someone runs the harness by hand (``warmup-late`` stopped
applying when the optimizer's warm-up line changed). Each text must occur exactly once in its module.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("breakages", ROOT / "mutation" / "breakages.py")
breakages = importlib.util.module_from_spec(spec)
spec.loader.exec_module(breakages)


@pytest.mark.parametrize("name", sorted(breakages.BREAKAGES))
def test_every_breakage_finds_its_text_exactly_once(name):
    module, replacements, _ = breakages.BREAKAGES[name]
    text = (ROOT / "src" / "depthlab" / module).read_text()
    for old, _new in replacements:
        assert text.count(old) == 1, f"{name}: {old!r} occurs {text.count(old)} times in {module}"
