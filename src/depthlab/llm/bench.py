"""Seed 002 §4's benchmark: ask a language model the retrieval questions and score it.

Protocol (seed 002 §4 and Appendix A): the prompt asks for the answer alone; a reply counts when, after
light normalisation, it *is* one of the question's acceptable answers (every candidate of the asked
type); otherwise the model is asked again, up to ``max_tries`` times in all, after which the question is
**flagged** and counts as wrong. The accepted answer is scored against the correct one.

Choices where the seed is silent (the habits of evaluation harnesses):

- The first try uses ``temperature`` (default 0: greedy); re-samples use ``retry_temperature``
  (default 1.0), since re-asking a greedy decoder gives the same reply again.
- Normalisation: a ``<think>…</think>`` block is dropped; surrounding whitespace, quotes, backticks,
  asterisks and a trailing ``.``/``!``/``,``/``;``/``:`` are stripped; the comparison ignores case. The
  reply must then equal a candidate: "The answer is 3" is not accepted (it is not the answer alone).
- ``n`` questions are asked per (formulation, depth) cell: with ``--depth 1-5`` equations and lives-with
  get 5 × n questions each; kingdoms is always asked at its fixed depth 5; functions and relatives have
  no depth.
- Question ``i`` of a cell is fixed by (seed, formulation, depth, chains, i) (see
  :mod:`depthlab.llm.prompts`), and try ``t`` of it is seeded by a hash of (seed, key, t).

Everything goes to the store as one run (task ``llm-bench``) whose id is the hash of the arguments that
change the answers (runner, formulations, depths, n, seed, chains, max_tries, temperatures): one record
per question under the key ``<formulation>/D<depth>/<index>`` holding the prompt, the correct and
acceptable answers, every raw reply, the accepted answer, the verdict, the number of tries and the flag.
Records are written as questions finish, so rerunning the same command after an interruption asks only
the questions not yet answered. A question the endpoint refuses (HTTP 400, 413 or 422: about that question,
not the endpoint) is recorded as failed, with the status and the server's one-line reason, and not scored
(summaries count it under ``failed``); the others are asked, and a rerun asks it again. Any other failure of
the endpoint (after the runner's retries) stops the benchmark. The summary (stored as the run's ``final``)
gives accuracy per cell and per formulation with a 95 % Wilson interval and the chance level (the mean over
questions of 1 / number of acceptable answers). The summary names where seed 002 Figure 2 (accuracy against
D, chance dashed) goes, ``out`` or the run's artifact ``accuracy.png``; ``depthlab.draw.llm.accuracy_figure``
draws it.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from depthlab.errors import UserError
from depthlab.llm.prompts import (
    DEFAULT_CHAINS,
    FORMULATIONS,
    MAX_DEPTH,
    Prompt,
    check_chains,
    check_formulation,
    has_depth,
    question,
    resolve_depth,
)
from depthlab.llm.runners import EndpointError, Reply, Request, Runner
from depthlab.memory import require_memory
from depthlab.secrets import redact

TASK = "llm-bench"
DEFAULT_N = 500
DEFAULT_MAX_TRIES = 5
Z95 = 1.959963984540054
# HTTP statuses that refuse one question (its content, its length), not the endpoint: that question is recorded as
# failed (status and the server's reason) and the others are asked; anything else stops the benchmark
QUESTION_ERRORS = frozenset({400, 413, 422})
# a question in memory (its prompt, record and JSON) per character of its text, and beyond (measured on every
# formulation at its default depth: 2.6 to 6 KiB a question)
QUESTION_BYTES_PER_CHARACTER, QUESTION_BYTES = 6, 4096

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_STRIP = " \t\r\n\"'`*_“”‘’"
_TRAILING = ".!,;:"


# ------------------------------------------------------------------------------------- parameters


def parse_depths(spec: str | None, option: str = "--depth") -> list[int]:
    """``"1-5"`` → [1, 2, 3, 4, 5]; ``"3"`` → [3]; ``"1,3,6-8"`` → [1, 3, 6, 7, 8]."""
    if spec is None or not str(spec).strip():
        return [1, 2, 3, 4, 5]
    depths: set[int] = set()
    for part in str(spec).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise UserError(f"{option}: expected a depth, a range or a list such as 5, 1-5 or 1,3,5 (got {spec!r})")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if lo > hi or lo < 1 or hi > MAX_DEPTH:
            raise UserError(f"{option}: depths run from 1 to {MAX_DEPTH}, low to high (got {part!r})")
        depths.update(range(lo, hi + 1))
    return sorted(depths)


@dataclass
class BenchConfig:
    """What is asked. Every field is part of the run's identity (a change starts a new run)."""

    formulations: list[str] = field(default_factory=lambda: list(FORMULATIONS))
    depths: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    n: int = DEFAULT_N
    seed: int = 0
    chains: int = DEFAULT_CHAINS
    max_tries: int = DEFAULT_MAX_TRIES
    temperature: float = 0.0
    retry_temperature: float = 1.0

    def __post_init__(self) -> None:
        if not self.formulations:
            self.formulations = list(FORMULATIONS)
        seen: list[str] = []
        for f in self.formulations:
            check_formulation(f, "--formulation")
            if f not in seen:
                seen.append(f)
        self.formulations = seen
        self.depths = sorted(set(int(d) for d in self.depths))
        if not self.depths or not all(1 <= d <= MAX_DEPTH for d in self.depths):
            raise UserError(f"--depth: depths run from 1 to {MAX_DEPTH} (got {self.depths})")
        if self.n < 1:
            raise UserError(f"-n: must be at least 1 question (got {self.n})")
        if self.max_tries < 1:
            raise UserError(f"--max-tries: must be at least 1 (got {self.max_tries})")
        if self.temperature < 0 or self.retry_temperature < 0:
            raise UserError("--temperature, --retry-temperature: must be 0 (greedy) or more")
        if self.seed < 0:
            raise UserError(f"--seed: must be 0 or more (got {self.seed})")
        for f, d in self.cells():
            check_chains(f, d, self.chains)

    def cells(self) -> list[tuple[str, int | None]]:
        """The (formulation, depth) cells asked, n questions each."""
        out: list[tuple[str, int | None]] = []
        for f in self.formulations:
            if has_depth(f):
                out += [(f, d) for d in self.depths]
            else:
                out.append((f, resolve_depth(f, None)))
        return out


def require_question_memory(cells: list[tuple[str, int | None]], n: int, chains: int, what: str) -> None:
    """ResourceError when ``n`` questions of each cell cannot fit (estimated from each cell's question 0)."""
    need = 0
    for formulation, depth in cells:
        first = question(formulation, 0, 0, depth, chains)
        characters = len(first.prompt) + sum(len(a) for a in first.acceptable)
        need += n * (QUESTION_BYTES_PER_CHARACTER * characters + QUESTION_BYTES)
    require_memory(need, what, "lower -n")


def record_key(formulation: str, depth: int | None, index: int) -> str:
    return f"{formulation}/D{'-' if depth is None else f'{depth:03d}'}/{index:06d}"


def try_seed(seed: int, key: str, attempt: int) -> int:
    digest = hashlib.sha256(f"{seed}/{key}/{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def match_answer(reply: str, acceptable: list[str] | tuple[str, ...]) -> str | None:
    """The acceptable answer ``reply`` is (see module doc for the normalisation), or None."""
    text = _THINK.sub("", reply or "")
    previous = None
    while previous != text:
        previous = text
        text = text.strip(_STRIP).rstrip(_TRAILING)
    folded = text.casefold()
    for candidate in acceptable:
        if candidate.casefold() == folded:
            return candidate
    return None


# ----------------------------------------------------------------------------------------- asking


def _refused(error: EndpointError) -> bool:
    return getattr(error, "status", None) in QUESTION_ERRORS


def generate(runner: Runner, requests: list[Request]) -> list[Reply | EndpointError]:
    """The runner's replies, in order; a question the endpoint refuses (``QUESTION_ERRORS``) gets its error
    instead. When one is refused, the batch is asked again one request at a time to find which (a refusal is
    never retried, so only the answered ones are asked twice)."""
    try:
        return list(runner.generate(requests))
    except EndpointError as e:
        if not _refused(e):
            raise
    outs: list[Reply | EndpointError] = []
    for request in requests:
        try:
            outs.extend(runner.generate([request]))
        except EndpointError as e:
            if not _refused(e):
                raise
            outs.append(e)
    return outs


def ask(runner: Runner, items: list[tuple[str, Prompt]], config: BenchConfig) -> dict[str, dict[str, Any]]:
    """Ask every question of ``items`` (key, prompt) by the protocol; return their records by key."""
    replies: dict[str, list[str]] = {key: [] for key, _ in items}
    attempts: dict[str, list[int]] = {key: [] for key, _ in items}
    answers: dict[str, str] = {}
    refused: dict[str, EndpointError] = {}
    pending = list(items)
    for t in range(config.max_tries):
        if not pending:
            break
        temperature = config.temperature if t == 0 else config.retry_temperature
        requests = [Request(p.prompt, temperature, try_seed(config.seed, key, t)) for key, p in pending]
        outs = generate(runner, requests)
        still: list[tuple[str, Prompt]] = []
        for (key, p), out in zip(pending, outs, strict=True):
            if isinstance(out, EndpointError):
                refused[key] = out
                continue
            replies[key].append(out.text)
            attempts[key].append(out.attempts)
            answer = match_answer(out.text, p.acceptable)
            if answer is None:
                still.append((key, p))
            else:
                answers[key] = answer
        pending = still
    records: dict[str, dict[str, Any]] = {}
    for key, p in items:
        answer = answers.get(key)
        error = refused.get(key)
        records[key] = {
            "formulation": p.formulation,
            "depth": p.depth,
            "index": int(key.rsplit("/", 1)[1]),
            "prompt": p.prompt,
            "correct": p.correct,
            "acceptable": list(p.acceptable),
            "replies": replies[key],
            "http_attempts": attempts[key],
            "answer": answer,
            "tries": len(replies[key]),
            "flagged": answer is None and error is None,
            "verdict": "failed" if error else "correct" if answer == p.correct else "wrong",
        }
        if error is not None:  # one line, with no key in it in any form
            records[key]["error"] = {"status": error.status, "message": redact(str(error))}
    return records


# --------------------------------------------------------------------------------------- summaries


def wilson(k: int, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """The Wilson score interval of k successes in n trials (None, None when n == 0)."""
    if n <= 0:
        return None, None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))  # p inside despite rounding (k = n)


def _stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Scores of the answered questions; ``failed`` counts those the endpoint refused (not scored)."""
    failed = sum(r["verdict"] == "failed" for r in records)
    records = [r for r in records if r["verdict"] != "failed"]
    n = len(records)
    k = sum(r["verdict"] == "correct" for r in records)
    lo, hi = wilson(k, n)
    return {
        "n": n,
        "correct": k,
        "accuracy": k / n if n else None,
        "ci_low": lo,
        "ci_high": hi,
        "chance": sum(1 / len(r["acceptable"]) for r in records) / n if n else None,
        "flagged": sum(bool(r["flagged"]) for r in records),
        "mean_tries": sum(r["tries"] for r in records) / n if n else None,
        "failed": failed,
    }


def summarize(records: dict[str, dict[str, Any]], config: BenchConfig) -> dict[str, Any]:
    """Accuracy (95 % Wilson interval, chance level) per (formulation, depth) cell and per formulation."""
    cells = []
    for f, d in config.cells():
        rows = [r for r in records.values() if r["formulation"] == f and r["depth"] == d]
        cells.append({"formulation": f, "depth": d, **_stats(rows)})
    per_formulation = []
    for f in config.formulations:
        rows = [r for r in records.values() if r["formulation"] == f]
        per_formulation.append({"formulation": f, **_stats(rows)})
    overall = _stats(list(records.values()))
    return {"cells": cells, "formulations": per_formulation, "overall": overall}


# --------------------------------------------------------------------------------------------- run


def run_bench(
    runner: Runner,
    store: Any,
    config: BenchConfig,
    out: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """Run (or resume) the benchmark; return the summary (also stored as the run's ``final``), whose ``figure``
    is where the caller draws seed 002 Figure 2.

    ``progress(done, total)`` is called as questions finish. ``store`` is a :class:`depthlab.store.Store`.
    """
    runner_info = runner.describe()
    run_config = {"kind": TASK, "runner": runner_info, **asdict(config)}
    model = label or str(runner_info.get("model"))
    cells = config.cells()
    require_question_memory(cells, config.n, config.chains, f"-n: {config.n * len(cells):,} questions")
    rid = store.create_run(run_config, task=TASK, model=model, tags=["llm"])
    done = store.records(rid)
    todo: list[tuple[str, Prompt]] = []
    total = 0
    for f, d in config.cells():
        for i in range(config.n):
            total += 1
            key = record_key(f, d, i)
            if key not in done or done[key]["verdict"] == "failed":  # a refused question is asked again
                todo.append((key, question(f, i, config.seed, d, config.chains)))
    resumed = total - len(todo)
    if progress:
        progress(resumed, total)
    chunk = max(8, 4 * int(getattr(runner, "parallelism", 1)))
    if todo:
        store.set_status(rid, "running", step=resumed)
    try:
        for start in range(0, len(todo), chunk):
            records = ask(runner, todo[start : start + chunk], config)
            store.put_records(rid, records)
            done.update(records)
            store.set_status(rid, "running", step=len(done))
            if progress:
                progress(len(done), total)
    except KeyboardInterrupt:
        store.set_status(rid, "interrupted", step=len(done), error="interrupted; rerun the same command to resume")
        raise
    except Exception as e:
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        store.set_status(rid, "failed", step=len(done), error=redact(message))  # no key reaches the store
        raise
    summary = summarize(done, config)
    if out is not None:
        fig_path = Path(out).expanduser().absolute()
    else:
        fig_path = store.add_artifact(rid, "figure", "accuracy.png", {"what": "seed 002 Figure 2"})
    result = {
        "run_id": rid,
        "store": str(store.root),
        "model": model,
        "runner": runner_info,
        "config": asdict(config),
        "questions": total,
        "asked": len(todo),
        "resumed": resumed,
        **summary,
        "figure": str(fig_path),
    }
    store.finish_run(rid, result, status="done", step=len(done))
    return result
