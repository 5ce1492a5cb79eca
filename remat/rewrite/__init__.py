"""What remat changes in a traced program so that its stages are the eager model's program, and
the node classification those changes and the cut read (docs/architecture.md, "rewrite")."""
