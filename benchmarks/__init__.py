"""The benchmarks of remat: run one with `python -m benchmarks.NAME`, every CPU one quickly with
`python -m benchmarks --quick` (benchmarks/README.md lists them)."""
