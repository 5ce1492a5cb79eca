"""The ``optimal`` chain strategy's dynamic program; its front door is :mod:`remat.solver.chain.optimal`.

* one recording option per stage: the table (:mod:`~remat.solver.chain.dp.table`, filled by the
  compiled :mod:`~remat.solver.chain.dp.kernel`), the exact minimum
  (:mod:`~remat.solver.chain.dp.minimum`), reading schedules back
  (:mod:`~remat.solver.chain.dp.readback`), the front and the answer at a budget
  (:mod:`~remat.solver.chain.dp.single`);
* several recording options per stage: the table (:mod:`~remat.solver.chain.dp.options`, filled by
  :mod:`~remat.solver.chain.dp.options_kernel`), its front and answer
  (:mod:`~remat.solver.chain.dp.options_front`);
* what is kept between calls: :data:`remat.solver.chain.dp.cache.CACHE`.
"""
