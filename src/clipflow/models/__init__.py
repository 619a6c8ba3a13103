"""Video models, built by name from a recipe's model section."""

from clipflow.models.builder import MODEL_NAMES, build_model, count_parameters, model_info

__all__ = ["MODEL_NAMES", "build_model", "count_parameters", "model_info"]
