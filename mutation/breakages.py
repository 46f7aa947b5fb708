"""The fifteen deliberate breakages of issues 34 and 44, each re-made in a scratch copy of ``src`` and run against a
test selection (``make test-fast`` by default): every one must make a test fail.

Each breakage is one or two exact text replacements in one module (refused if the text is not there exactly once,
so a breakage that no longer applies is said, not silently skipped). The tests run with ``PYTHONPATH`` pointing at
the broken copy; the working tree is never touched.

    python mutation/breakages.py                       # all fifteen against the fast tier (pytest -m fast)
    python mutation/breakages.py --only eval run0      # the breakages whose name contains one of these
    python mutation/breakages.py --only eval -- tests/test_provenance.py -n 0   # other pytest arguments after --
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name -> (module under src/depthlab, [(text, replacement), ...], what it breaks)
BREAKAGES: dict[str, tuple[str, list[tuple[str, str]], str]] = {
    "eval-from-training": ("training/data.py", [
        ('full = task.enumerate("eval")', 'full = task.enumerate("train")'),
        ('np.random.default_rng(EVAL_SEED), "eval")', 'np.random.default_rng([0, 0xDA7A]), "train")'),
    ], "the evaluation set's split and generator swapped for the training ones"),
    "run0-stream": ("training/engine.py", [
        ("data_stream(config.task, config.seed,", "data_stream(config.task, 0,"),
    ], "every run of a group given run 0's data stream (the run's seed not passed to its stream)"),
    "resume-from-zero": ("training/engine.py", [
        ("            if loaded is not None:\n", "            if False:\n"),
    ], "resume ignores the checkpoint and retrains from step 0"),
    "leave-wrong-state": ("training/optim.py", [
        ("kept = [{name: t[keep] for", "kept = [{name: t[torch.zeros_like(keep)] for"),
    ], "runs still training after others leave get run 0's optimizer state"),
    "clip-over-group": ("training/optim.py", [
        ("norms = [torch.linalg.vector_norm(flat.grad, dim=1) for flat in self.flats]",
         "norms = [torch.linalg.vector_norm(flat.grad).expand(flat.grad.shape[0]).clone() for flat in self.flats]"),
    ], "the gradient-clip norm taken over all runs of a group"),
    "warmup-late": ("training/optim.py", [
        ("torch.div(self.steps, float(self.warmup_steps), out=scratch)",
         "torch.div(self.steps - 1, float(self.warmup_steps), out=scratch)"),
    ], "warm-up one step late"),
    "weight-decay-zero": ("training/engine.py", [
        ("t.momentum, t.weight_decay, t.betas", "t.momentum, 0.0, t.betas"),
    ], "the engine passes weight_decay=0 to the optimizer"),
    "theorem3-margin": ("constructions/attention_only.py", [
        ("    match[: task.n_q, : task.n_q] = torch.eye(task.n_q)\n",
         "    match[: task.n_q, : task.n_q] = torch.eye(task.n_q)\n    match[0, 1] = 0.3\n"),
    ], "Theorem 3's match layer with cross-talk W_QK[0,1] = 0.3"),
    "compile-ignored": ("training/engine.py", [
        ('self.set_compiling(t.compile == "on")', 'self.set_compiling(False)'),
    ], "train.compile ignored"),
    "coupled-decay": ("training/optim.py", [
        ("                if self.weight_decay:\n                    p.mul_(c)\n",
         "                if self.weight_decay:\n                    g.add_(p, alpha=self.weight_decay)\n"),
    ], "AdamW without decoupled weight decay (L2 added to the gradient)"),
    "skipped-batch": ("training/data.py", [
        ('        self.rng.bit_generator.state = state["rng"]\n        self.drawn = drawn - state["pos"]\n'
         '        self._refill()\n        self.pos, self.drawn = state["pos"], drawn\n',
         '        self.rng.bit_generator.state = state["rng"]\n        self.drawn = drawn - state["pos"]\n'
         '        self._refill()\n        self.pos, self.drawn = state["pos"] + 1, drawn\n'),
    ], "a resumed run skips a batch"),
    "export-eps": ("models/export.py", [
        ('"eps": 1e-5', '"eps": 1e-4'),
    ], "the TransformerLens export's LayerNorm eps 1e-4"),
    "cell-key": ("cells.py", [
        ("return {k: v for k, v in config.items() if k != SEED}", "return dict(config)"),
    ], "a cell keyed with its seed (every run its own cell)"),
    "owner-check": ("training/checkpoint.py", [
        ("if run_id == self.run_id and digest in (None, self.config_sha256):", "if True:"),
    ], "the checkpoint owner check passes any run's checkpoint"),
    "adam-bias": ("training/optim.py", [
        ("torch.pow(b1, self.steps, out=a).neg_().add_(self.one)", "a.fill_(1.0)"),
    ], "Adam's first-moment bias correction left out"),
}
FAST = ["-m", "fast", "-n", "2", "--dist", "loadfile", "-x"]  # make test-fast, stopping at the first failure


def broken_copy(name: str, where: Path) -> Path:
    """A copy of ``src`` with breakage ``name`` applied; SystemExit if its text is not there exactly once."""
    module, replacements, _ = BREAKAGES[name]
    src = where / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    path = src / "depthlab" / module
    text = path.read_text()
    for old, new in replacements:
        if text.count(old) != 1:
            raise SystemExit(f"{name}: the text to break occurs {text.count(old)} times in {module}: {old!r}")
        text = text.replace(old, new)
    path.write_text(text)
    return src


def first_failure(output: str) -> str:
    """The first failing test and its message, from pytest's short summary."""
    for line in output.splitlines():
        if re.match(r"(FAILED|ERROR) ", line):
            return line[:300]
    return output.strip().splitlines()[-1][:300] if output.strip() else "(no output)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="breakages whose name contains one of these")
    argv = sys.argv[1:]
    ours, tests = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, FAST)
    args = parser.parse_args(ours)
    chosen = [n for n in BREAKAGES if not args.only or any(o in n for o in args.only)]
    missed = []
    for name in chosen:
        with tempfile.TemporaryDirectory(prefix=f"breakage-{name}-") as where:
            src = broken_copy(name, Path(where))
            env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
            started = time.time()
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *tests],
                                  cwd=ROOT, env=env, capture_output=True, text=True)
            seconds = time.time() - started
        caught = done.returncode not in (0, 5)
        if not caught:
            missed.append(name)
        said = first_failure(done.stdout) if caught else "NOT CAUGHT"
        print(f"{name} ({BREAKAGES[name][2]}; {seconds:.0f} s): {said}", flush=True)
    print(f"{len(chosen) - len(missed)} of {len(chosen)} caught" + (f"; missed: {', '.join(missed)}" if missed else ""))
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
