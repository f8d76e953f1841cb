"""Data in and labels out: every input becomes one row-chunked dask array; labels go back to Zarr.

Accepted inputs: a path to a Zarr array, or to a Zarr group plus an array name (local directory or any
fsspec URL zarr accepts); a ``.npy`` file; a ``.npz`` file plus an array name (default ``X``); an
``xarray.DataArray``; a dask array; a NumPy array (or anything ``numpy.asarray`` accepts).

Rows are samples. Where the dimensions have names (an ``xarray.DataArray``, a Zarr array with dimension names
as xarray and daskmeans write them) the names decide, not the order (:func:`sample_dimension`).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import dask
import dask.array as da
import numpy as np
import zarr
from dask.highlevelgraph import HighLevelGraph

from .. import config
from ..engine.client import resolve_client
from ..engine.slabs import compute_dtype, is_aligned, stored_form, with_stored_form
from ..engine.writes import compute_writes
from ..exceptions import InputDataError, InputDtypeError, InvalidParameterError
from .publish import atomic_output, zarr_options
from .remote import check_storage_options
from .sources import open_source

if TYPE_CHECKING:  # for type checkers only
    import xarray
    from distributed import Client
    from numpy.typing import ArrayLike


@dataclass
class Dataset:
    """One input, ready for the passes.

    Attributes
    ----------
    array : dask.array.Array
        ``(n_samples, n_features)`` float32 or float64, chunked along samples only. When the stored dtype differs,
        the array as stored is attached to it and the passes convert each block slab by slab
        (:mod:`daskmeans.engine.slabs`); computing ``array`` itself converts whole blocks.
    source_dtype : numpy.dtype
        The dtype as stored (e.g. uint8 for SIFT descriptors).
    in_memory : bool
        True when the input was a NumPy array (the data already lives in the driver's memory).
    location : str or None
        Path or URL of the Zarr store or file the data came from.
    sample_dim : str
        Name of the sample dimension (xarray input or a Zarr array with dimension names), used for labels.
    sample_coords : dict
        Coordinates along the sample dimension (xarray input), attached to labels.
    is_xarray : bool
        True when the input was an ``xarray.DataArray`` (labels and transforms are then DataArrays too).

    See Also
    --------
    open_input : Makes one from any supported input; a store on object storage is opened with its
        ``storage_options``, which the array keeps (every estimator's ``fit``, ``predict``, ``transform`` and
        ``score`` take the Dataset as it is).

    Examples
    --------
    >>> import numpy as np
    >>> from daskmeans import Dataset, KMeans, open_input
    >>> data = open_input(np.random.default_rng(0).random((1000, 3)))
    >>> isinstance(data, Dataset), data.n_samples, data.n_features
    (True, 1000, 3)
    >>> KMeans(2, random_state=0, progress=False).fit(data).cluster_centers_.shape
    (2, 3)
    """

    array: da.Array
    source_dtype: np.dtype
    in_memory: bool = False
    location: str | None = None
    sample_dim: str = "sample"
    sample_coords: dict = field(default_factory=dict)
    is_xarray: bool = False

    @property
    def n_samples(self) -> int:
        return int(self.array.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.array.shape[1])

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype


def _is_path(source) -> bool:
    return isinstance(source, (str, os.PathLike))


def _check_shape(shape, name: str):
    if len(shape) != 2:
        hint = (
            " Reshape your data either using X.reshape(-1, 1) if it has a single feature "
            "or X.reshape(1, -1) if it contains a single sample."
            if len(shape) == 1
            else " Flatten the trailing axes first, e.g. X.reshape(len(X), -1)."
        )
        raise InputDataError(
            f"Expected a 2-D array (n_samples, n_features) for {name}, got {len(shape)}-D shape {tuple(shape)}.{hint}"
        )
    if shape[0] == 0:
        raise InputDataError(f"{name} has 0 samples (shape {tuple(shape)}); at least one row is required.")
    if shape[1] == 0:
        raise InputDataError(f"{name} has 0 feature(s) (shape={tuple(shape)}) while a minimum of 1 is required.")


def _default_rows(n_features: int, itemsize: int) -> int:
    return max(config.MIN_CHOSEN_BLOCK_ROWS, config.TARGET_BLOCK_BYTES // max(1, n_features * itemsize))


def chosen_block_rows(n_samples: int, n_features: int, itemsize: int) -> int:
    """Rows per block where daskmeans chooses the chunking, from the shape alone (so that results do not depend on
    the cluster): about ``TARGET_BLOCK_BYTES`` of rows as computed, and at least ``MIN_CHOSEN_BLOCKS`` blocks of at
    least ``MIN_CHOSEN_BLOCK_ROWS`` rows when the data is smaller."""
    rows = min(
        _default_rows(n_features, itemsize),
        max(config.MIN_CHOSEN_BLOCK_ROWS, -(-int(n_samples) // config.MIN_CHOSEN_BLOCKS)),
    )
    return int(max(1, min(rows, n_samples)))


def _normalize_chunks(array: da.Array, chunk_rows: int | None, name: str, merge_small: bool) -> da.Array:
    """Rows chunked, features in one chunk, no zero-length blocks; small store chunks merged into larger blocks.

    A dask array's own row chunking is kept (the user chose it); a Zarr store's small chunks are merged.
    """
    if len(array.chunks[1]) > 1:
        warnings.warn(
            f"{name} is chunked along features ({len(array.chunks[1])} chunks); rechunking so that each block "
            "holds whole rows. Store the data with chunks=(rows, n_features) to avoid this extra work.",
            UserWarning,
            stacklevel=4,
        )
        array = array.rechunk({1: -1})
    itemsize = 4 if array.dtype.itemsize <= 4 else 8
    if chunk_rows is not None:
        return array.rechunk({0: int(chunk_rows)})
    row_chunks = array.chunks[0]
    if any(c == 0 for c in row_chunks):
        array = array.rechunk({0: tuple(c for c in row_chunks if c > 0)})
        row_chunks = array.chunks[0]
    largest = max(row_chunks) * array.shape[1] * itemsize
    if merge_small and largest < config.MIN_BLOCK_BYTES and len(row_chunks) > 1:
        per_block = max(1, _default_rows(array.shape[1], itemsize) // max(row_chunks))
        array = array.rechunk({0: max(row_chunks) * per_block})
    return array


def _refuse_sparse(source, name):
    if hasattr(source, "tocsr") and hasattr(source, "nnz"):
        raise InputDataError(
            f"Sparse input is not supported: {name} is a {type(source).__name__}. Convert it with X.toarray() "
            "(or store it dense in Zarr) before clustering."
        )


def _numeric_from_object(source: np.ndarray, name: str) -> np.ndarray:
    """An object array of numbers becomes float64; anything else is refused with a TypeError."""
    try:
        return source.astype(np.float64)
    except (TypeError, ValueError) as error:
        raise InputDtypeError(
            f"{name} has dtype object and holds values that are not numbers ({error}); the argument must be "
            "a string or a number convertible to float. Convert the data to float32/float64 first."
        ) from error


#: The dimension names that say which axis holds the samples and which the features.
SAMPLE_DIM, FEATURE_DIM = "sample", "feature"


def sample_dimension(dims, sample_dim: str | None = None, name: str = "X") -> int:
    """Which of two named dimensions holds the samples.

    The rule: ``sample_dim`` when given; else the dimension named ``"sample"``; else the one not named
    ``"feature"``; else (neither name) the first, as for a NumPy array.

    Parameters
    ----------
    dims : sequence of str or None
        The two dimension names (None: unnamed).
    sample_dim : str, optional
        The name of the sample dimension, given by the user.
    name : str
        How the input is called in error messages.

    Returns
    -------
    int
        0 or 1: the axis of the samples.

    Raises
    ------
    InputDataError
        ``sample_dim`` is not one of ``dims``.
    """
    dims = list(dims)
    if sample_dim is not None:
        if sample_dim not in dims:
            raise InputDataError(
                f"sample_dim={sample_dim!r} is not a dimension of {name}; its dimensions are {dims}. Pass one of them."
            )
        return dims.index(sample_dim)
    if SAMPLE_DIM in dims:
        return dims.index(SAMPLE_DIM)
    if FEATURE_DIM in dims:
        return 1 - dims.index(FEATURE_DIM)
    return 0


def _zarr_dimension_names(source) -> tuple | None:
    """The dimension names of a Zarr array (v3 ``dimension_names``, v2 xarray's ``_ARRAY_DIMENSIONS``), if any."""
    names = getattr(source.metadata, "dimension_names", None) or source.attrs.get("_ARRAY_DIMENSIONS")
    if not isinstance(names, (list, tuple)) or not any(isinstance(n, str) for n in names):
        return None
    return tuple(n if isinstance(n, str) else None for n in names)


def open_input(
    source: str | os.PathLike[str] | ArrayLike | da.Array | xarray.DataArray | zarr.Array | Dataset,
    *,
    array: str | None = None,
    chunk_rows: int | None = None,
    name: str = "X",
    sample_dim: str | None = None,
    storage_options: dict | None = None,
) -> Dataset:
    """Open any supported input as a :class:`Dataset` without reading its values.

    Parameters
    ----------
    source : str, os.PathLike, xarray.DataArray, dask.array.Array, numpy.ndarray or Dataset
        The data, ``(n_samples, n_features)``.
    array : str, optional
        Array name (or path, ``"sub/X"``) inside a Zarr group, or array name inside a ``.npz`` file.
    chunk_rows : int, optional
        Rows per block; by default the store's chunking, merged up to about 64 MiB blocks when it is small (a
        dask array's or xarray's chunking is kept); a NumPy array or a ``.npy``/``.npz`` file gets blocks of about
        64 MiB, at least 8 of them when the data is smaller (:func:`chosen_block_rows`).
    name : str
        How the input is called in error messages.
    sample_dim : str, optional
        The dimension that holds the samples, for inputs with named dimensions (an ``xarray.DataArray``, a Zarr
        array with dimension names). By default the dimension named ``"sample"``, else the one not named
        ``"feature"``, else the first. The other dimension holds the features; the data is transposed lazily when
        the samples are not first, and labels carry the sample dimension's name and coordinates.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL ``source`` (``s3://bucket/data.zarr``), as ``zarr.open`` takes
        them: ``{"endpoint_url": ..., "key": ..., "secret": ...}`` for an S3-compatible store, ``{"anon": True}``,
        ``{"profile": ...}``. The array keeps them: every task that reads a chunk, on any worker, opens the store
        with them, so the workers need no configuration of their own. Ignored for a local path; without them the
        filesystem reads the standard environment (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...).

    Returns
    -------
    Dataset

    Raises
    ------
    InputDataError
        Wrong number of dimensions, zero rows or features, a dtype that is not numeric, or a ``sample_dim`` that
        is not a dimension of the input (or an input without named dimensions).
    FileNotFoundError, PermissionError
        The path, or the bucket of a URL, does not exist or cannot be read.
    ConnectionError
        The object store of a URL cannot be reached (a wrong ``endpoint_url``, a store that is down).
    InvalidParameterError
        ``storage_options`` is not a dict, or is given with data that is not a path or URL.

    See Also
    --------
    write_labels : Writes labels back beside the data.

    Examples
    --------
    A NumPy array is cut into blocks of rows; nothing is computed until a pass reads them:

    >>> import numpy as np
    >>> from daskmeans import open_input
    >>> data = open_input(np.zeros((100_000, 4), dtype=np.uint8))
    >>> data.n_samples, data.n_features
    (100000, 4)
    >>> data.array.numblocks  # at least 8 blocks, so that a few workers share even small data
    (8, 1)
    >>> data.source_dtype, data.dtype  # integers are computed in float32, a block at a time
    (dtype('uint8'), dtype('float32'))

    A path opens the file or store without reading its values:

    >>> import os, tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "X.npy")
    >>> np.save(path, np.ones((1000, 3)))
    >>> open_input(path).array.shape
    (1000, 3)
    >>> folder.cleanup()

    A URL opens a store on object storage, with the options of its filesystem:

    >>> data = open_input(
    ...     "s3://bucket/descriptors.zarr", array="X",
    ...     storage_options={"endpoint_url": "http://minio:9000", "key": "...", "secret": "..."},
    ... )  # doctest: +SKIP
    """
    if isinstance(source, Dataset):
        return source
    storage_options = check_storage_options(storage_options)
    if storage_options is not None and not _is_path(source):
        raise InvalidParameterError(
            f"storage_options apply to a path or URL, but {name} is a {type(source).__name__}; drop "
            "storage_options, or pass the URL of the store."
        )
    if chunk_rows is not None and (not isinstance(chunk_rows, int) or chunk_rows <= 0):
        raise InputDataError(f"chunk_rows must be a positive integer, got {chunk_rows!r}.")
    location = None
    in_memory = False
    dims_given, sample_dim, sample_coords, is_xarray = sample_dim, SAMPLE_DIM, {}, False
    if _is_path(source):
        source, location = open_source(source, array, storage_options)
    elif array is not None:
        raise InputDataError("array= names an array inside a Zarr group or .npz file; pass a path with it.")

    if type(source).__module__.startswith("xarray") and hasattr(source, "dims"):
        if source.ndim != 2:
            _check_shape(source.shape, name)
        sample_dim = source.dims[sample_dimension(source.dims, dims_given, name)]
        source = source.transpose(sample_dim, ...)  # lazy for dask, a view for NumPy
        sample_coords = {key: coord.variable for key, coord in source.coords.items() if coord.dims == (sample_dim,)}
        is_xarray = True
        source = source.data
        dims_given = None

    from_store = isinstance(source, zarr.Array)
    stored_dims = _zarr_dimension_names(source) if from_store else None
    if dims_given is not None and stored_dims is None:
        raise InputDataError(
            f"sample_dim={dims_given!r} names a dimension, but {name} has no dimension names "
            "(a NumPy, dask, .npy or Zarr array without them: rows are samples). Drop sample_dim, "
            "or transpose the data so that rows are samples."
        )
    if isinstance(source, da.Array):
        raw = source
    elif from_store:
        _check_shape(source.shape, name)
        compute_dtype(source.dtype, name)
        raw = da.from_zarr(source)
        if stored_dims is not None:
            axis = sample_dimension(stored_dims, dims_given, name)
            sample_dim = stored_dims[axis] or SAMPLE_DIM
            raw = raw.T if axis == 1 else raw
    else:
        _refuse_sparse(source, name)
        if not isinstance(source, np.ndarray):
            try:
                source = np.asarray(source)
            except (ValueError, TypeError) as error:
                raise InputDataError(f"{name} could not be read as a numeric array: {error}") from error
            in_memory = True
        elif location is None:
            in_memory = True
        if source.dtype == object:
            source = _numeric_from_object(source, name)
        _check_shape(source.shape, name)
        rows = chunk_rows or chosen_block_rows(
            source.shape[0], source.shape[1], compute_dtype(source.dtype, name).itemsize
        )
        raw = da.from_array(
            source, chunks=(min(rows, source.shape[0]), source.shape[1]), name=None if location is None else False
        )

    _check_shape(raw.shape, name)
    if any(np.isnan(c) for c in raw.chunks[0]):
        raise InputDataError(f"{name} has unknown chunk sizes; call X.compute_chunk_sizes() first.")
    computed = compute_dtype(raw.dtype, name)
    source_dtype = raw.dtype
    raw = _normalize_chunks(raw, chunk_rows, name, merge_small=from_store)
    array = raw if raw.dtype == computed else with_stored_form(raw.astype(computed), raw)
    return Dataset(
        array=array,
        source_dtype=np.dtype(source_dtype),
        in_memory=in_memory,
        location=location,
        sample_dim=sample_dim,
        sample_coords=sample_coords,
        is_xarray=is_xarray,
    )


def _aligned(block: np.ndarray) -> np.ndarray:
    """``block`` itself when it is C-contiguous and starts at an aligned byte, else such a copy: a block that
    arrived through Dask's serialization can start at any byte, and the passes would copy it at every read."""
    if block.flags.c_contiguous and is_aligned(block):
        return block
    return np.array(block, order="C", copy=True)


def spread_on_workers(array: da.Array, client) -> da.Array:
    """An in-memory array (built from a NumPy array in this process) held by the workers, each a run of its row
    blocks, as stored: a uint8 input stays uint8 there (MNIST's 70,000 x 784: 55 MB in the workers instead of
    220 MB as float32), and the passes convert it slab by slab as they do a Zarr store's chunks.

    The blocks are not persisted from a graph, which would send the whole source through the scheduler (Dask warns
    about that for large arrays), keep float32 blocks and leave their placement to the scheduler. They go straight
    to the workers (``Client.scatter``), each worker a run of consecutive blocks in proportion to its threads, and
    are copied once there into aligned memory (a block deserialized in a worker can start at any byte, and the
    passes would copy it at every read). Runs make the passes that reduce where the blocks are exchange a few
    partial results per worker, not one per block (:func:`daskmeans.engine.graph.chained_group_pass`). Values, and
    so results, do not depend on where the blocks are.

    Parameters
    ----------
    array : dask.array.Array (n, d)
        As :func:`open_input` returns it for a NumPy source (its stored form attached when converted).
    client : distributed.Client

    Returns
    -------
    dask.array.Array
        The same values, chunks and dtype, its stored form attached when ``array`` had one.
    """
    stored = stored_form(array)
    values = dask.compute(*(stored.blocks[i] for i in range(stored.numblocks[0])), scheduler="sync")
    name = f"daskmeans-aligned-{dask.base.tokenize(stored)}"
    held = {}
    for worker, (start, stop) in runs_of_blocks(len(values), client.nthreads()):
        scattered = client.scatter(list(values[start:stop]), workers=[worker])
        # aligned where the block arrived: the run stays whole (a copy made elsewhere would move the block too)
        keys = [(name, i, 0) for i in range(start, stop)]
        held.update(zip(keys, client.map(_aligned, scattered, key=keys, workers=[worker], pure=False)))
    graph = HighLevelGraph.from_collections(name, held, dependencies=())
    placed = da.Array(graph, name, stored.chunks, dtype=stored.dtype, meta=np.empty((0, 0), dtype=stored.dtype))
    return placed if placed.dtype == array.dtype else with_stored_form(placed.astype(array.dtype), placed)


def runs_of_blocks(n_blocks: int, threads: dict) -> list:
    """``[(worker, (start, stop)), ...]``: consecutive runs of ``n_blocks`` blocks, one per worker (by address) in
    proportion to its ``threads``; workers whose share rounds to nothing get no run.

    Examples
    --------
    >>> runs_of_blocks(10, {"tcp://a": 1, "tcp://b": 1})
    [('tcp://a', (0, 5)), ('tcp://b', (5, 10))]
    """
    workers = sorted(threads)
    total = sum(max(1, int(threads[w])) for w in workers)
    runs, start, done = [], 0, 0
    for worker in workers:
        done += max(1, int(threads[worker]))
        stop = round(n_blocks * done / total)
        if stop > start:
            runs.append((worker, (start, stop)))
        start = stop
    return runs


def write_labels(
    labels: ArrayLike | da.Array | xarray.DataArray,
    path: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    client: Client | None = None,
    storage_options: dict | None = None,
) -> str:
    """Write labels (NumPy, dask or xarray, one per sample) to a Zarr array at ``path``.

    The array is published whole (:mod:`daskmeans.storage.publish`): written under a temporary name and moved
    into place when complete on a local disk, staged and committed by its metadata, written last, on an object
    store. A failure leaves no partial output that looks complete, and an existing array is kept unless
    ``overwrite`` is True. A natural place is beside the input, e.g. ``"descriptors.zarr/labels"`` for the input
    group ``descriptors.zarr``; when that group has consolidated metadata, it is written again to include the
    labels, so that ``xarray.open_zarr`` gives the data and the labels together.

    Parameters
    ----------
    labels : array-like of shape (n_samples,)
        Cluster indices, e.g. ``model.labels_`` or ``model.predict(X)``.
    path : str or os.PathLike
        Where the Zarr array goes.
    overwrite : bool
        Replace an existing array at ``path``.
    client : distributed.Client, optional
        Client that computes lazy labels; by default the active one (or the local scheduler).
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL ``path`` (``{"endpoint_url": ..., "key": ..., "secret": ...}``
        for an S3-compatible store), passed to Zarr.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    OutputExistsError
        Something exists at ``path`` and ``overwrite`` is False.

    See Also
    --------
    open_input : Opens the data the labels belong to.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import zarr
    >>> from daskmeans import write_labels
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = write_labels(np.array([0, 2, 1, 1]), os.path.join(folder.name, "labels.zarr"))
    >>> zarr.open_array(path, mode="r")[:].tolist()
    [0, 2, 1, 1]
    >>> folder.cleanup()
    """
    dims = None
    if type(labels).__module__.startswith("xarray"):
        dims = list(labels.dims)
        labels = labels.data
    if not isinstance(labels, da.Array):
        labels = da.from_array(np.asarray(labels))
    if labels.ndim != 1:
        raise InputDataError(f"labels must be 1-D (one per sample), got shape {labels.shape}.")
    chunk = max(labels.chunks[0]) if labels.shape[0] else 1
    labels = labels.rechunk(chunk)
    with atomic_output(path, overwrite, storage_options=storage_options) as tmp:
        # dimension_names lets xarray.open_zarr read the labels beside data written the same way
        target = zarr.open_array(
            store=tmp,
            mode="w",
            shape=labels.shape,
            chunks=(chunk,),
            dtype=labels.dtype,
            zarr_format=3,
            dimension_names=(dims[0] if dims else "sample",),
            storage_options=zarr_options(tmp, storage_options),
        )
        target.attrs["daskmeans"] = {"kind": "labels"}
        starts = np.cumsum((0,) + labels.chunks[0][:-1])
        writes = [
            dask.delayed(_store_rows, pure=False)(block, target, int(start))
            for block, start in zip(labels.to_delayed().ravel(), starts)
        ]
        compute_writes(writes, resolve_client(client))
    return os.fspath(path)


def _store_rows(values, target, start):
    """Write ``values`` to rows ``start ..`` of the Zarr array ``target`` (one chunk of it)."""
    target[start : start + len(values)] = values
