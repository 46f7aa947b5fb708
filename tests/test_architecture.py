"""The shape of the code: which package may import which, and what no module may do.

The packages of ``src/depthlab`` form layers (docs/architecture.md); dependencies point one way. Checked on the
parsed source of every module, so a new import that breaks the layering fails here, not in review.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import depthlab

ROOT = Path(depthlab.__file__).parent
BASE = {"errors", "bounded"}  # what every package may import (bounded: reading untrusted input)
ALLOWED = {  # the packages at the bottom import nothing above them
    "tasks": BASE, "models": BASE, "store": BASE, "errors": set(), "bounded": {"errors"}, "memory": BASE,
}
NOT_FROM_TRAINING = {"constructions", "analysis", "report", "sweeps", "cli", "draw", "induction", "llm", "api"}
API_USERS = {"cli", "__init__"}  # the Python API sits above every package but the CLI (and depthlab's own exports)
MAX_LINES = 500


def modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def package_of(path: Path) -> str:
    """``depthlab/models/base.py`` -> models; a top-level module is its own package (``config``)."""
    return path.relative_to(ROOT).parts[0].removesuffix(".py")


def imported(path: Path) -> list[tuple[str, list[str]]]:
    """(depthlab module path, imported names) for every import of depthlab code in ``path``."""
    here = list(path.relative_to(ROOT).with_suffix("").parts)
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("depthlab.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = here[:-1]  # the folder the module is in: what a single dot means
                base = package[: len(package) - node.level + 1]
                target = ".".join(["depthlab", *base, *([node.module] if node.module else [])])
            elif node.module and node.module.startswith("depthlab"):
                target = node.module
            else:
                continue
            out.append((target, [a.name for a in node.names]))
    return out


def edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in modules():
        source = package_of(path)
        for target, names in imported(path):
            parts = target.split(".")[1:]
            packages = {parts[0]} if parts else set(names)  # ``from depthlab import x``: the package is x
            graph.setdefault(source, set()).update(p for p in packages if p != source)
    return graph


def test_no_two_packages_import_each_other():
    graph = edges()
    cycles = sorted(f"{a} <-> {b}" for a, b in itertools.combinations(sorted(graph), 2)
                    if b in graph.get(a, ()) and a in graph.get(b, ()))
    assert not cycles, cycles


def test_the_bottom_packages_import_nothing_above_them():
    graph = edges()
    wrong = {p: sorted(graph.get(p, set()) - allowed) for p, allowed in ALLOWED.items()
             if graph.get(p, set()) - allowed}
    assert not wrong, wrong


def test_train_imports_no_paper_specific_or_higher_code():
    assert not edges().get("training", set()) & NOT_FROM_TRAINING


def test_only_the_cli_and_the_package_s_exports_use_the_api():
    assert sorted(p for p, targets in edges().items() if "api" in targets and p not in API_USERS) == []


def test_no_module_imports_another_module_s_private_names():
    private = [f"{path.relative_to(ROOT)}: {target}.{name}" for path in modules() for target, names in imported(path)
               for name in names if name.startswith("_") and not name.startswith("__")]
    assert not private, private


def test_every_module_is_under_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in modules() if (n := len(p.read_text().splitlines())) >= MAX_LINES}
    assert not long, long


TRAINING_PATH = ("training", "sweeps", "models", "tasks", "analysis", "constructions", "store", "draw", "report")


def test_only_training_device_knows_cuda():
    """Issue 18: the device is carried as an argument everywhere; no ``.cuda()`` call anywhere, and in the code a
    run trains through, only ``training/device.py`` names CUDA (the LLM runners pick their own device)."""
    for path in modules():
        tree = ast.parse(path.read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                 and n.func.attr == "cuda"]
        assert not calls, f"{path.relative_to(ROOT)}: .cuda() (use training.device)"
        if package_of(path) in TRAINING_PATH and path != ROOT / "training" / "device.py":
            strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            code = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
            named = [s for s in strings if s.startswith("cuda")] + [a for a in code if a == "cuda"]  # torch.cuda
            assert not named, f"{path.relative_to(ROOT)} names CUDA ({named}): ask training.device"
