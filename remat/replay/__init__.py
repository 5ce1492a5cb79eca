"""Running a schedule on the real model (chain or graph) and comparing it with the prediction
(docs/architecture.md)."""
