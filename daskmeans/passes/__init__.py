"""Full-data passes: Dask graph reductions over every block, shared by all algorithms."""
