"""Run and sweep configuration: pydantic specs, YAML loading, ``--set`` overrides, readable errors.

A run file has the sections ``task`` (with ``name``), ``model`` (``name`` defaults to attention_only), ``train``
and ``seed``; a sweep file is a run file plus ``sweep:``, a mapping from dotted field names to lists of values whose
product is the grid (at most :data:`MAX_GRID_POINTS` points, counted before it is expanded), and optionally
``resources:``, what each Ray task asks for (``--executor ray`` only; it is not part of any run's config, so it
never changes a run id). ``--set`` of a field the grid varies is refused (the grid would overwrite it at every
point): the grid's values are changed with ``--set sweep.FIELD=[…]``. Every mistake becomes a ``UserError`` whose
one-line message names the field, the value and what is allowed; a property-based fuzz
(``tests/test_fuzz_config.py``) checks that no other exception escapes.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from .bounded import MAX_TEXT_BYTES, BoundError, parse_yaml, read_file
from .errors import UserError
from .models import MODELS, ModelSpec
from .plugin_guards import PluginError
from .tasks import TASKS, Task

SECTIONS = ("task", "model", "train", "seed")
DEFAULT_MODEL = "attention_only"  # model.name when a config gives none
SWEEP_SECTIONS = ("sweep", "resources")  # besides SECTIONS, in a sweep file
MAX_SEED = 2**63 - 1
MAX_STEPS = 10**12  # bounds that keep every count far from int64 overflow
MAX_EXAMPLES = 2**24
MAX_GRID_POINTS = 10_000  # runs one sweep mapping may expand to (each is validated before any work)
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def _name(key: Any) -> str:
    """A field name as it may appear in a message: plain names as they are, anything else as its repr."""
    return key if isinstance(key, str) and _PLAIN_NAME.match(key) else _show(key)


def _show(value: Any, limit: int = 60) -> str:
    """A value for a one-line message: its repr, whitespace collapsed, cut to ``limit`` characters."""
    try:
        text = " ".join(repr(value).split())
    except Exception:  # a repr that fails (or recurses too deep) still leaves a message
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _text_keys(section: str, raw: dict) -> None:
    bad = [k for k in raw if not isinstance(k, str)]
    if bad:
        raise UserError(f"{section}: field names must be text (got {_show(bad[0])})")


def _no_bools_for_numbers(section: str, cls: type[BaseModel], raw: dict) -> None:
    """true/false where a number is asked for is a mistake (pydantic would read ``steps: true`` as 1 step)."""
    for key, value in raw.items():
        field = cls.model_fields.get(key)
        if isinstance(value, bool) and field is not None and "bool" not in str(field.annotation) \
                and key not in TRUE_FALSE_NAMED:
            raise UserError(f"{section}.{_name(key)}: must be a number, not {str(value).lower()}")


COMPILE_MODES = ("off", "on", "auto")  # train.compile
TRUE_FALSE_NAMED = frozenset({"compile"})  # fields once bool whose true/false still name a value (on/off)
DEVICE_NAMES = re.compile(r"auto|cpu|cuda(:\d+)?")  # train.device (resolved by training.device)
DEVICES_ALLOWED = "auto, cpu, cuda or cuda:N"
MAX_WORKERS_PER_DEVICE = 64


class TrainSpec(BaseModel):
    """How a run trains. SGD and cross-entropy are seed 001's protocol (§9.1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    optimizer: Literal["sgd", "adamw"] = "sgd"
    lr: float = Field(0.1, gt=0, allow_inf_nan=False)
    momentum: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False)
    weight_decay: float = Field(0.0, ge=0, allow_inf_nan=False,
                                description="AdamW: decoupled; SGD: L2 added to the gradient")
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = Field(0, ge=0, le=MAX_STEPS, description="linear learning-rate warm-up over this many steps")
    schedule: Literal["constant", "cosine", "linear"] = Field(
        "constant", description="the learning rate after the warm-up: constant, or decayed to lr_min by the last "
                                "step along a half cosine or a straight line")
    lr_min: float = Field(0.0, ge=0, allow_inf_nan=False,
                          description="where a cosine or linear schedule ends (at most lr)")
    grad_clip: float | None = Field(None, gt=0, allow_inf_nan=False,
                                    description="clip each run's gradient to this global norm")
    steps: int = Field(2000, ge=1, le=MAX_STEPS, description="maximum number of optimizer steps")
    batch_size: int = Field(64, ge=1, le=MAX_EXAMPLES)
    train_examples: int | None = Field(None, ge=1, le=2**30,
                                       description="a fixed training set of this many examples, cycled (seed 002 "
                                                   "§7.1: 2^20); None = fresh examples every step")
    stream: Literal[1, 2] | None = Field(None, description="training-data stream version: 1 (None) the host's numpy "
                                         "generator, 2 a counter-based one on the run's device (every "
                                         "task; fresh examples only; other examples, so other run ids)")
    eval_every: int = Field(100, ge=1, le=MAX_STEPS, description="log train and eval metrics every this many steps")
    eval_examples: int = Field(2048, ge=1, le=MAX_EXAMPLES,
                               description="eval examples per log point (the final eval uses all)")
    target_accuracy: float | None = Field(None, gt=0, le=1, allow_inf_nan=False,
                                          description="stop a run once its eval accuracy is this")
    precision: Literal["fp32", "bf16"] = "fp32"
    checkpoint_every: int | None = Field(None, ge=1, le=MAX_STEPS, description="also checkpoint every this many steps")
    keep_checkpoints: bool = Field(False, description="keep the weights of every checkpoint (history/), not only "
                                                      "the latest: what emergence analyses read")
    # where and how the run executes, not what it computes: kept out of the run id (EXECUTION_FIELDS)
    device: str = Field("auto", description="auto (a GPU when PyTorch sees one), cpu, cuda or cuda:N")
    compile: Literal["off", "on", "auto"] = Field(
        "off", description="compile the training step with torch.compile (Inductor): on (captured as one CUDA "
                           "graph on a GPU), auto (on a GPU, the faster of compiled and not, timed; off on a CPU), "
                           "off; true/false mean on/off")
    cuda_graph: Literal["auto", "on", "off"] = Field(
        "auto", description="replay each step as one CUDA graph: auto (on CUDA, where the step can be captured), "
                            "on (the same, said explicitly), off")
    workers_per_device: int | Literal["auto"] = Field(
        1, description="groups trained at once on each device, one worker process each (the local executor); "
                       "auto: as many as the GPU's free memory holds (1 on the CPU)")

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_mode(cls, value: Any) -> Any:
        """``true``/``false`` (what configs said before ``auto``) are ``on``/``off``; anything else but the three
        names is refused in one line."""
        if isinstance(value, bool):
            return "on" if value else "off"
        if value not in COMPILE_MODES:
            raise ValueError("allowed: off, on, auto (or true/false for on/off)")
        return value

    @field_validator("workers_per_device")
    @classmethod
    def _workers_range(cls, value: int | str) -> int | str:
        if value != "auto" and not 1 <= value <= MAX_WORKERS_PER_DEVICE:
            raise ValueError(f"must be auto or a whole number from 1 to {MAX_WORKERS_PER_DEVICE}")
        return value

    @field_validator("lr_min")
    @classmethod
    def _lr_min_reached(cls, value: float, info: ValidationInfo) -> float:
        if value and info.data.get("schedule") == "constant":
            raise ValueError("only a decaying schedule reaches it: set train.schedule to cosine or linear, "
                             "or leave lr_min at 0")
        if "lr" in info.data and value > info.data["lr"]:
            raise ValueError(f"must be at most lr ({info.data['lr']})")
        return value

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str) -> str:
        if not DEVICE_NAMES.fullmatch(value):
            raise ValueError(f"not a device; allowed: {DEVICES_ALLOWED}")
        return value

    @model_validator(mode="after")
    def _betas_range(self) -> TrainSpec:
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError("betas must both be in [0, 1)")
        if self.train_examples is not None and self.train_examples % self.batch_size:
            raise ValueError(f"train_examples ({self.train_examples}) must be a multiple of batch_size "
                             f"({self.batch_size})")
        if self.stream == 2 and self.train_examples is not None:
            raise ValueError("stream 2 makes fresh examples every step: leave train_examples unset")
        return self


class ResourceSpec(BaseModel):
    """What each Ray task (one group of runs) asks the cluster for: the ``resources:`` section of a sweep file.

    Used by ``--executor ray`` only; the local executor ignores it. Not part of any run's config.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: float = Field(1.0, gt=0, le=4096, allow_inf_nan=False, description="CPUs per task (also its torch threads)")
    gpus: float = Field(0.0, ge=0, le=64, allow_inf_nan=False, description="GPUs per task (fractions allowed)")
    memory_gb: float | None = Field(None, gt=0, le=1 << 20, allow_inf_nan=False,
                                    description="memory per task, for Ray's scheduler (GiB)")


# train fields that say where and how a run executes, not what it is
EXECUTION_FIELDS = frozenset({"device", "compile", "cuda_graph", "workers_per_device"})
# train fields added after runs were stored, and the value (each one's default: what runs stored before it did)
# at which a run's config leaves them out, so stored run ids stay valid
UNSET_LEFT_OUT: dict[str, Any] = {"train_examples": None, "stream": None, "schedule": "constant",
                                   "lr_min": 0.0}


class RunConfig(BaseModel):
    """One run: a task, a model, how to train, and a seed."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    task: Task
    model: ModelSpec
    train: TrainSpec
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The resolved config (every default filled in); its hash is the run id. Where and how the run executes
        (``EXECUTION_FIELDS``: ``train.device``, ``compile``, ``cuda_graph``, ``workers_per_device``) is left out: a
        run trained on a GPU is the same run as on the CPU (its final metrics record the device and precision)."""
        return {
            "task": {"name": self.task.name, **self.task.model_dump(mode="json")},
            "model": self.model.model_dump(mode="json"),
            "train": self.train.model_dump(mode="json", exclude=set(EXECUTION_FIELDS) | {
                f for f, default in UNSET_LEFT_OUT.items() if getattr(self.train, f) == default}),
            "seed": self.seed,
        }


def _format_error(section: str, error: ValidationError, allowed: list[str]) -> str:
    parts = []
    for e in error.errors():
        loc = ".".join(_name(x) for x in (section, *e["loc"]))
        msg = _one_line(e["msg"].removeprefix("Value error, "))
        if e["type"] == "extra_forbidden":
            msg = f"unknown field; allowed: {', '.join(allowed)}"
        elif e["type"] == "missing":
            msg = "required"
        got = e.get("input")
        if e["type"] not in ("missing", "extra_forbidden", "model_type") and not isinstance(got, dict):
            msg += f" (got {_show(got)})"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def _build(section: str, registry: dict[str, type[BaseModel]], raw: Any) -> Any:
    if not isinstance(raw, dict):
        raise UserError(f"{section}: must be a mapping with a 'name' field")
    _text_keys(section, raw)
    raw = dict(raw)
    name = raw.pop("name", None)
    if not isinstance(name, str) or name not in registry:
        problem = "required" if name is None else f"unknown {section} {_show(name)}"
        raise UserError(f"{section}.name: {problem}; allowed: {', '.join(sorted(registry))}")
    cls = registry[name]
    allowed = [f for f in cls.model_fields if f != "name"]
    _no_bools_for_numbers(section, cls, raw)
    origin = f" ({name} is defined in plugin {cls.plugin_file})" if getattr(cls, "plugin_file", None) else ""
    try:
        return cls(**raw) if section == "task" else cls(name=name, **raw)
    except ValidationError as e:
        blamed = [err["ctx"]["error"] for err in e.errors() if isinstance(err.get("ctx", {}).get("error"), PluginError)]
        if blamed:  # a plugin member out of its contract: its own line names the file, the task and the member
            raise blamed[0] from None
        raise UserError(_format_error(section, e, allowed) + origin) from None
    except PluginError:
        raise
    except (ValueError, TypeError, ArithmeticError, RecursionError, MemoryError) as e:
        raise UserError(f"{section}: {_one_line(e)[:200]}{origin}") from None


def parse_task(raw: dict[str, Any]) -> Task:
    """Validate a task mapping (``{"name": "icqa", "k": 3}``) into the task."""
    return _build("task", TASKS, raw)


def parse_run(raw: dict[str, Any]) -> RunConfig:
    """Validate a run mapping (already merged with overrides) into a RunConfig."""
    if not isinstance(raw, dict):
        raise UserError("config: must be a mapping with sections task, model, train, seed")
    unknown = sorted((k for k in raw if k not in SECTIONS), key=_show)
    if unknown:
        raise UserError(f"{_name(unknown[0])}: unknown section; allowed: {', '.join(SECTIONS)} "
                        f"(and {', '.join(SWEEP_SECTIONS)} in a sweep file)")
    if "task" not in raw:
        raise UserError("task: required (a mapping with the task's name and parameters)")
    task = parse_task(raw["task"])
    model_raw = raw.get("model") or {}
    if isinstance(model_raw, dict) and "name" not in model_raw:  # seed 001's model, also under --set model.X=…
        model_raw = {"name": DEFAULT_MODEL, **model_raw}
    model = _build("model", MODELS, model_raw)
    train_raw = raw.get("train") or {}
    if isinstance(train_raw, dict):
        _text_keys("train", train_raw)
        _no_bools_for_numbers("train", TrainSpec, train_raw)
    try:
        train = TrainSpec(**train_raw)
    except ValidationError as e:
        raise UserError(_format_error("train", e, list(TrainSpec.model_fields))) from None
    except TypeError:
        raise UserError("train: must be a mapping of training settings") from None
    if train.stream == 2 and not task.counter_sampling:
        counted = ", ".join(name for name, cls in TASKS.items() if cls.counter_sampling)
        raise UserError(f"train.stream: 2 is made on the device for the tasks {counted} only; task {task.name} "
                        "has stream 1")
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise UserError(f"seed: must be a non-negative integer below 2**63 (got {_show(seed)})")
    return RunConfig(task=task, model=model, train=train, seed=seed)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a mapping, with one-line errors for unreadable or malformed files.

    Bounded before it is read or built (``depthlab.bounded``): a regular file (not a device, a FIFO or a folder)
    of at most 1 MiB, nesting at most 64 levels, at most 200,000 values with its aliases expanded."""
    path = Path(path)
    data = read_file(path, MAX_TEXT_BYTES, "config")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"config: {path} is not a text file (not UTF-8 at byte {e.start}); a config is YAML "
                        "text") from None
    try:
        raw = parse_yaml(text, "config")
    except BoundError as e:
        raise UserError(f"config: {path} is {e.detail}") from None
    if not isinstance(raw, dict):
        raise UserError(f"config: {path} must hold a mapping with sections task, model, train, seed")
    return raw


def set_field(raw: dict[str, Any], dotted: str, value: Any, where: str = "--set") -> None:
    """Set ``raw[a][b]… = value`` for ``dotted = "a.b…"``, creating mappings as needed.

    ``where`` says in messages where the name came from: ``--set`` (an override) or ``sweep`` (a grid key).
    """
    if not isinstance(dotted, str):
        raise UserError(f"{where}: field names must be dotted text such as model.layers (got {_show(dotted)})")
    label = f"sweep.{_name(dotted)}" if where == "sweep" else f"{where} {_name(dotted)}"
    keys = dotted.split(".")
    if keys[0] not in (*SECTIONS, *SWEEP_SECTIONS):
        raise UserError(f"{label}: the field must start with one of {', '.join((*SECTIONS, *SWEEP_SECTIONS))}")
    if not all(keys):
        raise UserError(f"{label}: a field name is empty between the dots; write dotted names such as "
                        f"{keys[0]}.{'k' if keys[0] == 'task' else 'name'}")
    if keys[0] == "sweep" and len(keys) > 1:  # sweep keys are dotted names themselves: sweep.model.layers
        if not isinstance(raw.get("sweep"), dict):
            raw["sweep"] = {}
        raw["sweep"][dotted.removeprefix("sweep.")] = value
        return
    node = raw
    for key in keys[:-1]:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise UserError(f"{label}: {_name(key)} is not a mapping")
        node = child
    node[keys[-1]] = value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key=value`` strings (values parsed as YAML: ``2``, ``[1, 2]``, ``relu``) to a copy of raw."""
    out = copy.deepcopy(raw)
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise UserError(f"--set {_name(item)}: expected field=value, e.g. model.layers=2")
        key, text = item.split("=", 1)
        try:
            value = parse_yaml(text, "--set")
        except BoundError as e:
            raise UserError(f"--set {_name(key.strip())}: cannot parse value {_show(text)} ({e.detail})") from None
        _not_swept(out, key.strip())
        set_field(out, key.strip(), value)
    return out


def _not_swept(raw: dict[str, Any], dotted: str) -> None:
    """Refuse ``--set`` of a field the mapping's ``sweep:`` grid sets at every point (the grid would overwrite it):
    the user changes the grid's values instead (``--set sweep.FIELD=[…]``)."""
    grid = raw.get("sweep")
    if not isinstance(grid, dict) or dotted.startswith("sweep."):
        return
    for key, values in grid.items():
        if isinstance(key, str) and (dotted == key or dotted.startswith(f"{key}.")):
            raise UserError(f"--set {_name(dotted)}: the sweep varies {_name(key)} (sweep.{_name(key)}: "
                            f"{_show(values)}); give its values instead, e.g. --set 'sweep.{_name(key)}=[…]'")


def expand_sweep(raw: dict[str, Any]) -> list[RunConfig]:
    """Every run of a sweep mapping (the product of its ``sweep:`` lists), validated before any work."""
    if not isinstance(raw, dict):
        raise UserError("config: must be a mapping with sections task, model, train, seed (and sweep)")
    raw = copy.deepcopy(raw)
    grid = raw.pop("sweep", None) or {}
    raw.pop("resources", None)  # for the executor (parse_resources), not part of any run
    if not isinstance(grid, dict):
        raise UserError("sweep: must map dotted field names to lists of values, e.g. {model.layers: [1, 2]}")
    for key, values in grid.items():
        if not isinstance(key, str):
            raise UserError(f"sweep: field names must be dotted text such as model.layers (got {_show(key)})")
        if not isinstance(values, list) or not values:
            raise UserError(f"sweep.{_name(key)}: must be a non-empty list of values (got {_show(values)})")
    points = math.prod(len(values) for values in grid.values())
    if points > MAX_GRID_POINTS:
        sizes = " × ".join(f"{len(values):,} {_name(key)}" for key, values in grid.items())
        raise UserError(f"sweep: {points:,} grid points ({sizes}), more than the {MAX_GRID_POINTS:,} one sweep may "
                        f"expand to; split it into several sweep files or sweep fewer values")
    runs = []
    for combo in itertools.product(*grid.values()):
        point = copy.deepcopy(raw)
        for key, value in zip(grid, combo, strict=True):
            set_field(point, key, value, where="sweep")
        runs.append(parse_run(point))
    return runs


def parse_resources(raw: dict[str, Any]) -> ResourceSpec:
    """The ``resources:`` section of a sweep mapping (defaults when absent), validated."""
    section = raw.get("resources") if isinstance(raw, dict) else None
    if section is None:
        return ResourceSpec()
    if not isinstance(section, dict):
        raise UserError(f"resources: must be a mapping such as {{cpus: 1, gpus: 0}} (got {_show(section)})")
    _text_keys("resources", section)
    _no_bools_for_numbers("resources", ResourceSpec, section)
    try:
        return ResourceSpec(**section)
    except ValidationError as e:
        raise UserError(_format_error("resources", e, list(ResourceSpec.model_fields))) from None
