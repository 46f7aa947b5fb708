"""Run and sweep configuration: pydantic specs, YAML loading, ``--set`` overrides, readable errors.

A run file has the sections ``task`` (with ``name``), ``model`` (with ``name``), ``train`` and ``seed``;
a sweep file is a run file plus ``sweep:``, a mapping from dotted field names to lists of values whose
product is the grid, and optionally ``resources:``, what each Ray task asks for (``--executor ray`` only; it
is not part of any run's config, so it never changes a run id). Every mistake becomes a ``UserError`` whose
one-line message names the field, the value and what is allowed; a property-based fuzz
(``tests/test_fuzz_config.py``) checks that no other exception escapes.
"""

from __future__ import annotations

import copy
import itertools
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import UserError
from .models import MODELS, ModelSpec
from .tasks import TASKS, Task

SECTIONS = ("task", "model", "train", "seed")
SWEEP_SECTIONS = ("sweep", "resources")  # besides SECTIONS, in a sweep file
MAX_SEED = 2**63 - 1
MAX_STEPS = 10**12  # bounds that keep every count far from int64 overflow
MAX_EXAMPLES = 2**24
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
        if isinstance(value, bool) and field is not None and "bool" not in str(field.annotation):
            raise UserError(f"{section}.{_name(key)}: must be a number, not {str(value).lower()}")


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
    grad_clip: float | None = Field(None, gt=0, allow_inf_nan=False,
                                    description="clip each run's gradient to this global norm")
    steps: int = Field(2000, ge=1, le=MAX_STEPS, description="maximum number of optimizer steps")
    batch_size: int = Field(64, ge=1, le=MAX_EXAMPLES)
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
    compile: bool = Field(False, description="compile the training step with torch.compile")
    cuda_graph: Literal["auto", "on", "off"] = Field(
        "auto", description="replay each step as one CUDA graph: auto (on CUDA, where the step can be captured), "
                            "on (the same, said explicitly), off")
    workers_per_device: int | Literal["auto"] = Field(
        1, description="groups trained at once on each device, one worker process each (the local executor); "
                       "auto: as many as the GPU's free memory holds (1 on the CPU)")

    @field_validator("workers_per_device")
    @classmethod
    def _workers_range(cls, value: int | str) -> int | str:
        if value != "auto" and not 1 <= value <= MAX_WORKERS_PER_DEVICE:
            raise ValueError(f"must be auto or a whole number from 1 to {MAX_WORKERS_PER_DEVICE}")
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
            "train": self.train.model_dump(mode="json", exclude=set(EXECUTION_FIELDS)),
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
        raise UserError(f"{section}.name: unknown {section} {_show(name)}; allowed: {', '.join(sorted(registry))}")
    cls = registry[name]
    allowed = [f for f in cls.model_fields if f != "name"]
    _no_bools_for_numbers(section, cls, raw)
    try:
        return cls(**raw) if section == "task" else cls(name=name, **raw)
    except ValidationError as e:
        raise UserError(_format_error(section, e, allowed)) from None
    except (ValueError, TypeError, ArithmeticError, RecursionError, MemoryError) as e:
        raise UserError(f"{section}: {_one_line(e)[:200]}") from None


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
    model = _build("model", MODELS, raw.get("model", {"name": "attention_only"}))
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
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise UserError(f"seed: must be a non-negative integer below 2**63 (got {_show(seed)})")
    return RunConfig(task=task, model=model, train=train, seed=seed)


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error (YAML would keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key_node.value!r}",
                                                            key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a mapping, with one-line errors for unreadable or malformed files."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"config: cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"config: {path} is not a text file (not UTF-8 at byte {e.start}); a config is YAML "
                        "text") from None
    loader = None
    try:
        loader = UniqueKeyLoader(text)  # its reader refuses control characters (a NUL) at once
        data = loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(f"config: {path} is not valid YAML{where}: {' '.join(str(getattr(e, 'problem', e)).split())}"
                        ) from None
    except RecursionError:
        raise UserError(f"config: {path} nests its lists or mappings too deeply to be read") from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        raise UserError(f"config: {path} must hold a mapping with sections task, model, train, seed")
    return data


def set_field(raw: dict[str, Any], dotted: str, value: Any, where: str = "--set") -> None:
    """Set ``raw[a][b]… = value`` for ``dotted = "a.b…"``, creating mappings as needed.

    ``where`` says in messages where the name came from: ``--set`` (an override) or ``sweep`` (a grid key).
    """
    if not isinstance(dotted, str):
        raise UserError(f"{where}: field names must be dotted text such as model.layers (got {_show(dotted)})")
    label = f"sweep.{_name(dotted)}" if where == "sweep" else f"{where} {_name(dotted)}"
    keys = dotted.split(".")
    if not all(keys) or keys[0] not in (*SECTIONS, *SWEEP_SECTIONS):
        raise UserError(f"{label}: the field must start with one of {', '.join((*SECTIONS, *SWEEP_SECTIONS))}")
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
            value = yaml.safe_load(text)
        except (yaml.YAMLError, ValueError, RecursionError):
            raise UserError(f"--set {_name(key.strip())}: cannot parse value {_show(text)}") from None
        set_field(out, key.strip(), value)
    return out


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
