"""Model families. Importing this package registers every family in ``MODELS``."""

from . import attention_only, dss, linear_transformer, lstm, mamba, retnet, transformer  # noqa: F401  (registers the families)
from .base import MODELS, ModelOutput, ModelSize, ModelSpec, RunModule, TaskShapes, build_model, model_size
from .cache import ActivationCache
from .cfg import ModelConfig
from .factored import FactoredMatrix
from .hooks import HookPoint
from .single import SingleRunModel

__all__ = ["MODELS", "ActivationCache", "FactoredMatrix", "HookPoint", "ModelConfig", "ModelOutput", "ModelSize",
           "ModelSpec", "RunModule", "SingleRunModel", "TaskShapes", "build_model", "model_size"]
