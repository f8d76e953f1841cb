"""Full-data passes, one file each: Dask graph reductions over every block of the data (never an n x k matrix),
shared by all algorithms. They build graphs from kernels, run them through :mod:`daskmeans.engine`, and never
import algorithms or estimators."""
