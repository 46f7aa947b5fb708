"""The code the documentation shows runs as shown: the README's ten-line example prints what the README says, and
every Python block of the tutorials (docs/tutorials/*.md) runs, each page's blocks in order in one namespace in a
scratch folder, printing what the comments after each ``print`` say. Run in this process (its torch already
imported), the task registry restored afterwards (the tutorial registers a task of its own)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from depthlab import plugins
from depthlab.tasks.base import TASKS

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
NUMBER = re.compile(r"-?\d+\.\d+")


def python_blocks(path: Path) -> list[str]:
    return PYTHON_BLOCK.findall(path.read_text(encoding="utf-8"))


@pytest.fixture
def run(tmp_path, monkeypatch, capsys):
    """Runs code as a script in a scratch folder and returns the lines it printed; registries restored after."""
    monkeypatch.chdir(tmp_path)
    tasks, loaded = dict(TASKS), dict(plugins.LOADED)

    def run_code(code: str, name: str) -> list[str]:
        capsys.readouterr()
        exec(compile(code, name, "exec"), {"__name__": "__main__"})
        return capsys.readouterr().out.splitlines()

    yield run_code
    for registry, before in ((TASKS, tasks), (plugins.LOADED, loaded)):
        registry.clear()
        registry.update(before)


def shown_outputs(code: str) -> list[str]:
    """The comment lines right after a ``print(…)`` line: what the page says it prints."""
    shown, after_print = [], False
    for line in code.splitlines():
        if after_print and line.startswith("# "):
            shown.append(line[2:])
            continue
        after_print = line.startswith("print(")
    return shown


def matches(shown: str, printed: str) -> bool:
    """Equal text, ``...`` standing for anything; decimals equal to 1 % (a run's last digits may differ)."""
    pieces = re.split(r"(\.\.\.|-?\d+\.\d+)", shown)
    pattern = "".join(".*" if piece == "..." else NUMBER.pattern if NUMBER.fullmatch(piece) else re.escape(piece)
                      for piece in pieces)
    if not re.fullmatch(pattern, printed):
        return False
    return all(abs(float(a) - float(b)) <= 0.01 * abs(float(a)) + 1e-4
               for a, b in zip(NUMBER.findall(shown), NUMBER.findall(printed), strict=False))


def test_the_readme_example_is_ten_lines_and_prints_what_the_readme_says(run):
    (code,) = [block for block in python_blocks(ROOT / "README.md") if "depthlab.sweep" in block]
    assert len(code.strip().splitlines()) <= 10
    printed = run(code, "README.md")
    accuracy = {int(line.split()[0]): float(line.split()[1]) for line in printed if re.fullmatch(r"\d\s+[\d.]+", line)}
    assert abs(accuracy[1] - 1 / 3) < 0.01 and accuracy[2] >= 0.99  # "1 layer: 1/k = 0.33; 2 layers: 1.0"
    assert printed[-1] == "2 torch.Size([1, 1, 11, 11])"


@pytest.mark.parametrize("page", TUTORIALS, ids=lambda page: page.stem)
def test_every_python_block_of_a_tutorial_runs_and_prints_what_it_shows(page, run):
    blocks = python_blocks(page)
    assert blocks, f"{page.name}: no Python block"
    code = "\n".join(blocks)
    printed = run(code, page.name)
    shown = shown_outputs(code)
    assert len(printed) == len(shown) or not shown, (shown, printed)
    for expected, actual in zip(shown, printed, strict=False):
        assert matches(expected, actual), (expected, actual)


def test_the_task_of_your_own_is_the_example_file_as_it_is():
    (listing,) = [block for block in python_blocks(ROOT / "docs" / "tutorials" / "own-task.md") if "@register" in block]
    assert listing == (ROOT / "examples" / "kv_recall.py").read_text(encoding="utf-8")
