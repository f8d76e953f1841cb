"""Where the work runs: which Dask cluster and how to reach it, and one task pinned to one worker (``client``),
named tree reductions over the blocks of a dask array (``graph``), and random streams keyed by (seed, stage,
block, row) so that results never depend on the scheduler (``random``). Tunables: ``engine`` in
:mod:`daskmeans.config`."""
