"""``train.compile: auto`` on a GPU: time the captured eager step against the captured compiled step, keep the faster.

A group whose step is replayed as a CUDA graph trains its first steps eagerly (warm-up, capture), then times
:data:`TRIAL_STEPS` replays of the captured eager step, switches to the compiled step (warm-up, where it compiles,
and a new capture), times as many replays of it, and keeps the faster: the compiled step stays, or the eager one is
captured again. Each replay timed is the wall time between a synchronisation of the device before it and one after
it (the step's launch, its batch copy and the GPU's work; not the evaluation and logging between steps), and a
mode's time is their mean. The synchronisations are the trial's only (its 40 steps); every timed step is a real
training step (nothing is run twice). A group whose runs change during a timing (runs left: the graph is
captured again) times that mode again from its next capture.

The choice is the run's: the compiled step differs from the eager one in float rounding, so a run checkpointed and
resumed continues in the mode it trained in (recorded in its checkpoint), without a new trial.
"""

from __future__ import annotations

import time

import torch

from .device import synchronize

TRIAL_STEPS = 20  # timed replays of each mode (retrieval at 256 runs: tens of milliseconds a step on an H100)


class CompileTrial:
    """Which mode is being timed, how far, and (once both are timed) the faster one."""

    def __init__(self, device: torch.device, steps: int = TRIAL_STEPS) -> None:
        self.device, self.steps = device, steps
        self.trying = "off"  # the eager step first: it needs no compile, and its capture is the one most tested
        self.seconds: dict[str, float] = {}  # seconds a step, by mode (off, on)
        self.timed = 0
        self.elapsed = 0.0  # seconds of the replays timed so far in this mode
        self.started = 0.0
        self.chosen: str | None = None

    def before(self, replaying: bool) -> None:
        """Called before a step: a replay to be timed starts the clock (after the work already queued)."""
        if self.chosen is None and replaying:
            synchronize(self.device)
            self.started = time.perf_counter()

    def after(self, replayed: bool) -> str | None:
        """Called after a step (``replayed``: it was a replay); the mode to switch to now, if any."""
        if self.chosen is not None or not replayed:
            return None
        synchronize(self.device)
        self.elapsed += time.perf_counter() - self.started
        self.timed += 1
        if self.timed < self.steps:
            return None
        self.seconds[self.trying] = self.elapsed / self.steps
        self.restart()
        if self.trying == "off":
            self.trying = "on"
            return "on"
        self.chosen = min(self.seconds, key=self.seconds.__getitem__)
        return None if self.chosen == "on" else "off"

    def restart(self) -> None:
        """The graph was captured again mid-timing (runs left): time this mode again from its next replay."""
        self.timed, self.elapsed = 0, 0.0

    def metrics(self) -> dict[str, float]:
        """Milliseconds a step of each mode timed (the final metrics' ``step_ms_eager``, ``step_ms_compiled``)."""
        names = {"off": "step_ms_eager", "on": "step_ms_compiled"}
        return {names[mode]: round(seconds * 1e3, 4) for mode, seconds in self.seconds.items()}

    def summary(self) -> str:
        """The choice in one line (part of ``step_mode``)."""
        if self.chosen is None:
            return f"train.compile auto: ended during its trial ({self.trying} being timed)"
        times = ", ".join(f"{'compiled' if mode == 'on' else 'eager'} {seconds * 1e3:.3g} ms"
                          for mode, seconds in self.seconds.items())
        return f"train.compile auto chose {'compiled' if self.chosen == 'on' else 'eager'} ({times} a step)"
