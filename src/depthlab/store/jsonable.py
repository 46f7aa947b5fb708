"""The store's JSON rules: strict JSON (``allow_nan=False``) of :func:`to_jsonable` values.

NaN and ±inf become ``null``, numpy scalars and arrays become Python values, tuples become lists, paths
become strings; so a diverged run never produces invalid JSON.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np


def to_jsonable(obj: Any) -> Any:
    """``obj`` with NaN/±inf replaced by None, numpy scalars/arrays by Python values, tuples by lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, str | bool | int):
        return obj
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, dict):
        return {_json_key(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return obj  # let json.dumps raise on anything it cannot write


def _json_key(key: Any) -> Any:
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, float) and not math.isfinite(key):
        return str(key)
    return key


def to_json(obj: Any, **kwargs: Any) -> str:
    """Strict JSON (``allow_nan=False``) of ``to_jsonable(obj)``; ``kwargs`` go to :func:`json.dumps`."""
    return json.dumps(to_jsonable(obj), allow_nan=False, **kwargs)

