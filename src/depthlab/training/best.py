"""Each run's best evaluation beside its final one, and whether it learned the task and then lost it.

A run is scored at every log point on the probe (``train.eval_examples`` of the evaluation set) and once at the end
on the whole set (the final metrics). A final accuracy alone cannot tell a run that never learned from one that
learned and then collapsed (issue 43: seed 001's 3-layer IC-QA under AdamW reached 1.0 at step 1,600 and ended at
0.30), so the final metrics also keep the best log-point evaluation and, when the run reached its target at a log
point but its final evaluation is below it, the step from which it stayed below: "learned, then lost at step S".
"""

from __future__ import annotations

import math
from typing import Any

LEARNED = 0.95  # the accuracy a run counts as learned at when its config sets no target (the min-depth studies' own)


def best_evaluation(curve: dict[str, list]) -> dict[str, Any] | None:
    """The log point with the highest accuracy (the earliest of equals) of an eval ``curve`` (``{"step": [...],
    "accuracy": [...], "loss": [...]}``): ``{"accuracy", "loss", "step"}``; None when no point has an accuracy
    (regression tasks, or no log point)."""
    points = [(a, -s, loss) for s, a, loss in zip(curve.get("step", []), curve.get("accuracy", []),
                                                  curve.get("loss", []), strict=False)
              if a is not None and math.isfinite(a)]
    if not points:
        return None
    accuracy, step, loss = max(points, key=lambda p: (p[0], p[1]))
    return {"accuracy": accuracy, "step": -step, "loss": loss}


def lost_at(curve: dict[str, list], final_accuracy: float | None, target: float) -> int | None:
    """The step from which a run that reached ``target`` at a log point stayed below it, when its final accuracy is
    below it (the first log point after the last one at the target; the final step when that last one was the final
    step's probe); None when it never reached the target or ends at it."""
    if final_accuracy is None or final_accuracy >= target:
        return None
    steps, accuracies = curve.get("step", []), curve.get("accuracy", [])
    at_target = [i for i, a in enumerate(accuracies) if a is not None and a >= target]
    if not at_target:
        return None
    last = at_target[-1]
    return int(steps[last + 1] if last + 1 < len(steps) else steps[last])


def best_and_lost(curve: dict[str, list], final_accuracy: float | None, target: float | None,
                  probe_examples: int) -> dict[str, Any]:
    """What the final metrics keep beside the final evaluation: ``best`` (with the probe's size: the log points
    are scored on it, not on the whole set) and ``learned_then_lost`` (``{"target", "step"}`` or None)."""
    target = LEARNED if target is None else target
    best = best_evaluation(curve)
    step = lost_at(curve, final_accuracy, target)
    return {"best": None if best is None else {**best, "eval_examples": probe_examples},
            "learned_then_lost": None if step is None else {"target": target, "step": step}}
