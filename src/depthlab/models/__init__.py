"""Model families. Importing this package registers every family in ``MODELS``."""

from . import attention_only, dss, linear_transformer, lstm, mamba, retnet, transformer  # noqa: F401  (registers the families)
from .base import MODELS, ModelOutput, ModelSize, ModelSpec, RunModule, TaskShapes, build_model, model_size
from .hooks import ActivationCache, HookPoint
from .single import SingleRunModel

__all__ = ["MODELS", "ActivationCache", "HookPoint", "ModelOutput", "ModelSize", "ModelSpec", "RunModule",
           "SingleRunModel", "TaskShapes", "build_model", "model_size"]
