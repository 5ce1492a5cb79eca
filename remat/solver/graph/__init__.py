"""Graph strategies: profiles of DAGs of nodes (docs/model.md). Never imports torch."""
