"""The JSON summary and tables of ``benchmarks/paper_check.sh``: the plans' GPU-minutes and what each paper scale
trained before its time limit.

    python benchmarks/paper_check_summary.py OUT MODE STARTED FINISHED

Reads ``OUT/steps.jsonl`` (one line per step), each step's printed JSON and each step's store
(``OUT/stores/NAME``), and writes ``OUT/paper_check.json`` (also printed, without the per-run rows) and
``OUT/tables.md``: the projected time of every preset's paper scale on this device (minutes), and per step the
runs it finished (final and best accuracy, "learned, then lost", what the evaluation was).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from gpu_check_summary import machine, printed_json


def plan_rows(out: Path) -> list[dict[str, Any]]:
    """One row per planned preset (``plans``' printed JSON, or the lines it streamed before its limit stopped it):
    runs, projected minutes on the device (None when the plan failed, its error named)."""
    printed = printed_json(out / "plans.out") or {}
    rows = []
    for plan in printed.get("plans") or printed.get("cases") or []:
        seconds = plan.get("projected_seconds")
        rows.append({"preset": plan["name"], "runs": plan.get("runs"), "device": plan.get("device"),
                     "minutes": None if seconds is None else round(seconds / 60, 1),
                     "upper_bound": plan.get("upper_bound"), "error": plan.get("error")})
    return rows


def store_runs(store_root: Path) -> list[dict[str, Any]]:
    """Every run of a step's store: status, steps and the final metrics a reader of the seeds wants first."""
    from depthlab.store import Store
    from depthlab.store.layout import DB_NAME

    if not (store_root / DB_NAME).exists():  # the step was stopped before it made its store
        return []
    with Store(store_root, readonly=True) as store:
        out = []
        for run in store.find_runs():
            final = run.get("final") or {}
            config = run.get("config") or {}
            out.append({"id": run["id"], "task": run["task"], "model": run["model"], "status": run["status"],
                        "step": run["step"], "layers": (config.get("model") or {}).get("layers"),
                        "heads": (config.get("model") or {}).get("heads"), "lr": (config.get("train") or {}).get("lr"),
                        "seed": config.get("seed"),
                        "accuracy": final.get("accuracy"), "best": final.get("best"),
                        "learned_then_lost": final.get("learned_then_lost"),
                        "eval_protocol": final.get("eval_protocol")})
        return out


def tables(plans: list[dict[str, Any]], runs: dict[str, list[dict[str, Any]]]) -> str:
    """The Markdown tables: plans (minutes per preset), then the runs each step finished."""
    lines = ["| preset | runs | device | projected minutes (upper bound) |", "|---|---:|---|---:|"]
    lines += [f"| {p['preset']} | {p['runs'] if p['runs'] is not None else '—'} | {p['device'] or '—'} | "
              f"{p['minutes'] if p['minutes'] is not None else p['error'] or 'not finished'} |" for p in plans]
    for name, rows in runs.items():
        counts = Counter(r["status"] for r in rows)
        lines += ["", f"**{name}**: " + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no runs"), ""]
        done = [r for r in rows if r["status"] == "done"]
        if done:
            lines += ["| task | model | layers | heads | lr | seed | step | final | best (step) | learned, then lost | "
                      "evaluation |", "|---|---|---:|---|---:|---:|---:|---:|---:|---|---|"]
            for r in done:
                best = r["best"] or {}
                lost = r["learned_then_lost"]
                lines.append(f"| {r['task']} | {r['model']} | {r['layers']} | {r['heads']} | {r['lr']:g} | "
                             f"{r['seed']} | {r['step']} | "
                             f"{_acc(r['accuracy'])} | {_acc(best.get('accuracy'))} ({best.get('step', '—')}) | "
                             f"{'at step ' + str(lost['step']) if lost else ''} | {r['eval_protocol'] or '—'} |")
    return "\n".join(lines) + "\n"


def _acc(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def main(out: Path, mode: str, started: float, finished: float) -> dict[str, Any]:
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines() if line.strip()]
    plans = plan_rows(out)
    runs = {s["name"]: store_runs(out / "stores" / s["name"]) for s in steps if s["name"] != "plans"}
    results = {s["name"]: printed_json(out / f"{s['name']}.out") for s in steps if s["name"] != "plans"}
    summary = {"mode": mode, "machine": machine(), "wall_seconds": round(finished - started, 1), "steps": steps,
               "plans": plans, "runs": runs, "results": results, "figures": str(out / "figures")}
    (out / "paper_check.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "tables.md").write_text(tables(plans, runs))
    print(json.dumps({k: summary[k] for k in ("mode", "machine", "wall_seconds", "steps", "plans")}, indent=1))
    return summary


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
