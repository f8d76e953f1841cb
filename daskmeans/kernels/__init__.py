"""Numba kernels on one block: NumPy in, NumPy out, no Dask, nothing of daskmeans but other kernels, ``config``
and ``exceptions``. ``distance`` holds the one exact squared distance the others use; each kernel has a plain
NumPy reference in ``tests/kernels``."""
