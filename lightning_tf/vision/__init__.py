"""Vision Transformer classification: ImageDataModule and ViTClassifier."""

__all__: list[str] = []
