"""Numba kernels on one block: NumPy in, NumPy out, no dask. Each has a NumPy reference in the tests."""
