"""Property-based fuzz of config validation: whatever the mapping, the only exception is a one-line UserError.

``parse_run``, ``expand_sweep``, ``apply_overrides`` and ``parse_resources`` get arbitrary YAML-like
mappings: real section and field names mixed with junk keys, every kind of scalar (huge integers, NaN,
infinities, odd text), nested lists and mappings. Each call either returns configs or raises ``UserError``
whose message is one line that starts with the field it is about (``train.lr: …``, ``sweep.seed: …``).
"""

from __future__ import annotations

import math
import os
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthlab.config import SECTIONS, TrainSpec, apply_overrides, expand_sweep, parse_resources, parse_run
from depthlab.errors import UserError
from depthlab.models import MODELS
from depthlab.tasks import TASKS

FUZZ = settings(max_examples=int(os.environ.get("DEPTHLAB_FUZZ_EXAMPLES", 120)), deadline=None,
                suppress_health_check=list(HealthCheck), derandomize="DEPTHLAB_FUZZ_EXAMPLES" not in os.environ,
                database=None)

TASK_FIELDS = sorted({f for cls in TASKS.values() for f in cls.model_fields})
MODEL_FIELDS = sorted({f for cls in MODELS.values() for f in cls.model_fields})
TRAIN_FIELDS = sorted(TrainSpec.model_fields)
ROOTS = {*SECTIONS, "sweep", "config", "resources", "--set"}

junk_text = st.text(max_size=12)
scalars = (st.none() | st.booleans() | st.integers(-3, 12) | st.integers() | st.floats()
           | st.sampled_from([0.5, 1e-3, 2**63, -(2**63), 10**40, "1", "", "relu", "nan", "inf"]) | junk_text)
keys = st.sampled_from(TASK_FIELDS + MODEL_FIELDS + TRAIN_FIELDS) | junk_text | st.integers(-2, 2) | st.none()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                      max_leaves=10)


def section(names: list[str], fields: list[str]) -> st.SearchStrategy:
    field_values = st.dictionaries(st.sampled_from(fields) | keys, values, max_size=5)
    named = st.builds(lambda name, rest: {**rest, "name": name}, st.sampled_from(names) | scalars, field_values)
    return named | field_values | values


runs = st.fixed_dictionaries({}, optional={
    "task": section(sorted(TASKS), TASK_FIELDS),
    "model": section(sorted(MODELS), MODEL_FIELDS),
    "train": st.dictionaries(st.sampled_from(TRAIN_FIELDS) | keys, values, max_size=5) | values,
    "seed": scalars,
})
extra_sections = st.dictionaries(keys, values, max_size=2)
dotted = st.sampled_from(["seed", "train.lr", "train.steps", "model.layers", "task.k", "task.name", "model",
                          "sweep", "task.", ".x", "train.lr.x", "resources.cpus"]) | junk_text | st.integers()
grids = st.dictionaries(dotted, st.lists(values, max_size=3) | values, max_size=3) | values


def check_message(error: UserError, raw: object) -> None:
    message = str(error)
    assert message and "\n" not in message and "\r" not in message, repr(message)
    assert "Traceback" not in message
    field, sep, _ = message.partition(": ")
    assert sep, f"no 'field: ' prefix in {message!r}"
    if field.startswith("--set "):  # an override names the field as the user typed it
        return
    root = re.split(r"[.\[]", field, maxsplit=1)[0]
    raw_keys = {repr(k) for k in raw} | {str(k) for k in raw} if isinstance(raw, dict) else set()
    assert root in ROOTS or field in raw_keys, f"message does not start with a field: {message!r}"


def valid_runs(configs) -> None:
    for c in configs:
        assert c.train.lr > 0 and math.isfinite(c.train.lr)
        assert 0 <= c.seed < 2**63


@given(runs, extra_sections)
@FUZZ
def test_parse_run_raises_only_user_errors(raw, extra):
    raw = {**extra, **raw} if extra and len(raw) % 2 else raw
    try:
        valid_runs([parse_run(raw)])
    except UserError as e:
        check_message(e, raw)


@given(runs, grids)
@FUZZ
def test_expand_sweep_raises_only_user_errors(raw, grid):
    raw = {**raw, "sweep": grid}
    try:
        valid_runs(expand_sweep(raw))
    except UserError as e:
        check_message(e, raw)


@given(runs, st.lists(st.builds(lambda k, v: f"{k}={v}", dotted, st.text(max_size=15) | scalars.map(str))
                      | junk_text, max_size=4))
@FUZZ
def test_set_overrides_raise_only_user_errors(raw, overrides):
    try:
        valid_runs(expand_sweep(apply_overrides(raw, overrides)))
    except UserError as e:
        check_message(e, raw)


@given(st.fixed_dictionaries({}, optional={"resources": st.dictionaries(
    st.sampled_from(["cpus", "gpus", "memory_gb", "max_retries"]) | keys, values, max_size=4) | values}))
@FUZZ
def test_parse_resources_raises_only_user_errors(raw):
    try:
        spec = parse_resources(raw)
        assert spec.cpus > 0 and spec.gpus >= 0
    except UserError as e:
        check_message(e, raw)


@given(values)
@FUZZ
def test_yaml_round_trip_of_fuzzed_values_still_validates(value):
    """What a YAML file can hold (after safe_dump/safe_load) is handled like the mapping itself."""
    try:
        text = yaml.safe_dump({"task": {"name": "icqa", "k": value}, "seed": value})
    except yaml.YAMLError:
        return
    raw = yaml.safe_load(text)
    try:
        parse_run(raw)
    except UserError as e:
        check_message(e, raw)


def test_resources_section_is_validated_and_kept_out_of_run_ids():
    base = {"task": {"name": "icqa"}, "sweep": {"seed": [0, 1]}}
    with_resources = apply_overrides({**base, "resources": {"cpus": 2}}, ["resources.gpus=0.5"])
    assert parse_resources(with_resources).model_dump() == {"cpus": 2.0, "gpus": 0.5, "memory_gb": None}
    assert parse_resources(base).cpus == 1.0
    assert [c.to_dict() for c in expand_sweep(with_resources)] == [c.to_dict() for c in expand_sweep(base)]
    for bad, needle in [({"cpus": 0}, "resources.cpus: Input should be greater than 0"),
                        ({"gpu": 1}, "resources.gpu: unknown field; allowed: cpus, gpus, memory_gb"),
                        ([1], "resources: must be a mapping")]:
        with pytest.raises(UserError, match=re.escape(needle)):
            parse_resources({**base, "resources": bad})
