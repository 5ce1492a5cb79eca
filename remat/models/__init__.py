"""Where models come from: module specs, library models (transformers, torchvision, timm), inputs
(docs/architecture.md)."""
