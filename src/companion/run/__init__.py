"""Running notebooks: parameters in (:mod:`~companion.run.inputs`), output folders (:mod:`~companion.run.outputs`),
executing one notebook (:mod:`~companion.run.execute`), the warm kernel (:mod:`~companion.run.jupyter_kernel`) and the run
server that keeps it (:mod:`~companion.run.server`), process lifetime (:mod:`~companion.run.process`); sweeps: grids
(:mod:`~companion.run.grid`), the store of finished points (:mod:`~companion.run.store`), the Dask side
(:mod:`~companion.run.cluster`), the driver (:mod:`~companion.run.sweep`) and a sweep's table
(:mod:`~companion.run.table`)."""
