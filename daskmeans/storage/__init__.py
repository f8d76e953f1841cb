"""Everything that touches files: the array a path names, unread (``sources``), inputs opened as one row-chunked
dask array and labels written back (``io``), safe Zarr groups, atomic outputs and the one JSON encoder
(``zarr_safe``), saved models (``model``, classes found through :mod:`daskmeans.registry`) and fit checkpoints
(``checkpoint``, identified by ``fingerprint``)."""
