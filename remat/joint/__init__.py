"""``joint``: remat's partitioner of AOTAutograd's joint graph, under ``torch.compile``.

``remat.compile(model, budget=...)`` (:mod:`remat.joint.compile`) compiles a model with inductor
and partitions each joint graph itself: the joint graph as a graph profile (``joint_profile``, times in
``timing``), the graph solvers' schedules turned into save sets and realized as torch's forward
and backward graphs (``plan``, ``solve``), inductor's hook (``partition``). Every private torch
name these use is in ``torch_private``, behind a check of the torch release. docs/compile.md.
"""
