"""The old flat home of everything that touches torch, kept as aliases: every ``remat.executor.X``
module is the module that now lives in its room (docs/architecture.md lists where each went), so
specs such as ``remat.executor.zoo.small:cnn`` and imports such as
``remat.executor.profiler.profile_chain`` keep working."""
