"""Each run of a store: its settings, its evaluation-accuracy curve (the probe logged every eval_every steps), the
final accuracy (the run's last evaluation, on every evaluation example) and the best probe value with its step, and
whether it learned and then lost it (best probe >= 0.99, final < 0.95).

    python curves.py STORE [STORE ...]              # one line per run, then its curve
    python curves.py --markdown STORE [STORE ...]   # one table row per run (RESULTS.md)
"""
from __future__ import annotations

import sys

from depthlab.store import Store

LEARNED, KEPT = 0.99, 0.95


def rows(store_path: str) -> list[dict]:
    store = Store(store_path)
    out = []
    for run in store.find_runs():
        config = run["config"]
        curve = store.metric_columns(run["id"], split="eval").get("eval", {})
        steps, accuracy = curve.get("step", []), curve.get("accuracy", [])
        best = max(range(len(steps)), key=lambda i: accuracy[i]) if steps else None
        final = (run.get("final") or {}).get("accuracy")
        out.append({"id": run["id"][:10], "status": run["status"], "config": config, "steps": steps,
                    "accuracy": accuracy, "best": None if best is None else (accuracy[best], steps[best]),
                    "final": final, "lost": best is not None and final is not None and accuracy[best] >= LEARNED
                    and final < KEPT})
    return out


def recipe(train: dict) -> str:
    return (f"{train['optimizer']} lr {train['lr']}, clip {train.get('grad_clip')}, warm-up {train['warmup_steps']}"
            f"{', wd ' + str(train['weight_decay']) if train.get('weight_decay') else ''}")


def main(args: list[str]) -> None:
    markdown = "--markdown" in args
    for path in (a for a in args if a != "--markdown"):
        for r in rows(path):
            c = r["config"]
            final = "running" if r["final"] is None else f"{r['final']:.4f}"
            best = "—" if r["best"] is None else f"{r['best'][0]:.4f} (step {r['best'][1]:,})"
            if markdown:
                print(f"| {c['task']['name']} | {c['model']['layers']} | {c['seed']} | {recipe(c['train'])} | "
                      f"{c['train']['steps']:,} | {final} | {best} | {'learned, then lost' if r['lost'] else ''} |")
                continue
            print(f"{r['id']} {r['status']:8} {c['task']['name']:8} L={c['model']['layers']} seed={c['seed']} "
                  f"{recipe(c['train'])} | final {final} | best probe {best}")
            print("   ", " ".join(f"{s}:{a:.3f}" for s, a in zip(r["steps"], r["accuracy"], strict=True)))


if __name__ == "__main__":
    main(sys.argv[1:])
