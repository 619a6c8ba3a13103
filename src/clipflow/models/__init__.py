"""Video and image models, built by name from a recipe's model section."""

from clipflow.models.builder import MODEL_NAMES, build_model, count_parameters, is_image_model, model_info

__all__ = ["MODEL_NAMES", "build_model", "count_parameters", "is_image_model", "model_info"]
