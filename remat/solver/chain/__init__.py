"""Chain strategies: profiles of sequential stages (docs/model.md). Never imports torch."""
