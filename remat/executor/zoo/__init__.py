"""The old path of :mod:`remat.zoo`: each ``remat.executor.zoo.X`` is an alias of ``remat.zoo.X``
(the same module object), so specs such as ``remat.executor.zoo.small:cnn`` keep working."""
