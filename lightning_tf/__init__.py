"""lightning-tf: one Transformer core, three task families, driven by LightningCLI."""

__version__ = "0.1.0"
