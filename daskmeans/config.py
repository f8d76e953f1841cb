"""Every tunable of daskmeans in one place: slab and block sizes, pool sizes, driver limits, default rules.

These are not parameters of any estimator: they bound memory per task and set the grain of the work, and no
result depends on them beyond floating-point summation order where said. Each is documented where it is set.

The code reads a setting where it uses it (``config.NAME``, never a copy made at import), so a change takes effect
from the next call that reads it. Change settings for a block of code with :func:`set` as a context manager, or
for the rest of the process with a plain call (or an assignment); :func:`reset` restores the defaults and
:func:`get` reads one by name::

    from daskmeans import config

    with config.set(SLAB_BYTES=2**20):  # restored on leaving the block
        model.fit(X)
    config.set(POOL_ROWS=2**16)  # kept
    config.reset()  # every setting back to its default

Settings and worker processes: a worker process imports daskmeans itself, with the defaults. Each task that
daskmeans builds carries the settings that differ from their defaults where the graph is built (the driver), and
a task running in another process applies them while it runs (:func:`carried`, :func:`applied`), so a change
made on the driver reaches the tasks that read settings on the workers: the slab sizes of every pass
(``SLAB_BYTES``), the kernels' tile, slab and block sizes (``ASSIGN_*``, ``ONE_GROUP_TILE_ROWS``, ``PANEL_*``,
``REVISIT_*``, ``DENSE_PAIRS_LIMIT``, ``KERNEL_CENTERS_SLAB_BYTES``, ``VRKM_SLAB_BYTES``,
``GREEDY_DISTANCE_MATRIX_BYTES``, ``RECLUSTER_SLAB_BYTES``), the generation blocks of ``make_blobs_zarr``
(``GENERATION_BLOCK_VALUES``) and the work run in one task on a worker (``init="two-level"``'s fine level, VRKM's
inner loop). The other settings are read on the driver when a fit or a command decides something.
"""

from __future__ import annotations

import copy
import difflib
import numbers
import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .exceptions import InvalidParameterError

# -- engine: task graphs ------------------------------------------------------------------------------------------

#: Fan-in of a tree reduction: partial results one combine task merges (a count). The order in which sums are
#: combined follows from it, so results can change in the last bits when it changes.
SPLIT_EVERY = 8
#: Bytes up to which a driver-side array given to every block task of a pass (centers, shifts) travels inside each
#: task; a larger one becomes a task of its own, transferred between workers (:func:`daskmeans.engine.graph.shared`).
SHARED_INLINE_BYTES = 256 * 2**10
#: Bytes of partial results (as the pass estimates them) up to which the last combine of a tree reduction runs on
#: the driver, saving one dispatch and one transfer between workers per pass
#: (:func:`daskmeans.engine.graph.tree_reduce`).
DRIVER_COMBINE_BYTES = 4 * 2**20
#: Group tasks per worker thread, at least, that a pass over data read by each pass makes on a cluster: each reads
#: a run of consecutive blocks one after the other, so the scheduler handles a few tasks per thread instead of one
#: per block (:func:`daskmeans.engine.grouped.map_reduce_blocks`); more make the threads' shares more even.
GROUP_TASKS_PER_THREAD = 2
#: Bytes of partial results a group task may hold while it reduces its blocks (``SPLIT_EVERY - 1`` per tree
#: level); passes whose partials are larger (large k) make smaller groups, or one task per block.
GROUP_PARTIALS_BYTES = 64 * 2**20
#: Seconds to wait, after a write task fails on a cluster, for the other writes still running to end before the
#: error is raised and the output's temporary folder removed (:func:`daskmeans.engine.writes.compute_writes`).
WRITES_SETTLE_SECONDS = 120.0
#: Seconds between two looks at the writes still running while waiting for them (``WRITES_SETTLE_SECONDS``).
WRITES_POLL_SECONDS = 0.05
#: Seconds to wait, after a failed write into a temporary output, for Zarr's I/O still under way in this process
#: before the output is removed (:func:`daskmeans.storage.publish.settle_zarr_io`).
ZARR_SETTLE_SECONDS = 10.0
#: Seconds to wait, once every output of a write is complete, before it is published (moved or committed into
#: place; :class:`daskmeans.storage.publish.publication`). 0 in use: a longer pause widens the moment in which two
#: runs writing the same output compete, which is how the tests show that only one of them publishes it.
PUBLISH_PAUSE_SECONDS = 0.0
#: Seconds to wait for a scheduler before giving up (``connect``, the CLI's ``--connect-timeout`` default).
CONNECT_TIMEOUT_SECONDS = 10.0
#: Seconds beyond the connect timeout that ``connect`` waits for a scheduler's handshake before calling the address
#: silent, so that a connection that failed outright (refused, no route) is reported as such.
CONNECT_HANDSHAKE_GRACE_SECONDS = 1.0
#: Bytes (of the input as computed) up to which a command without ``--scheduler`` runs on a local cluster of threads
#: in its own process, which starts at once; a larger input gets worker processes, which take seconds to start.
LOCAL_THREADS_MAX_BYTES = 2**30
#: ``--local-workers`` choices: what runs the tasks when no scheduler is given
#: (:class:`daskmeans.engine.cluster.ClusterSpec`).
LOCAL_WORKERS = ("auto", "processes", "threads", "scheduler")
#: glibc allocator settings (environment variables, values in bytes) for the worker processes of the embedded
#: cluster, in place of Dask's ``MALLOC_TRIM_THRESHOLD_=65536``: arrays up to 32 MiB come from the process's heap, and
#: up to 128 MiB of free heap is kept for the next iteration's arrays, since memory returned to the kernel comes back
#: as fresh pages that are slow to touch again. Left alone when the user's Dask configuration sets its own
#: ``MALLOC_TRIM_THRESHOLD_``.
WORKER_MALLOC_ENVIRON = {"MALLOC_MMAP_THRESHOLD_": 2**25, "MALLOC_TRIM_THRESHOLD_": 2**27}
#: A worker whose process memory exceeds this fraction of its limit hands its heap's freed memory back to the operating
#: system at the end of a fit, and when nmbatch's batch leaves the workers' memory
#: (:func:`daskmeans.engine.worker_memory.release_freed_memory`).
WORKER_TRIM_FRACTION = 0.5
#: Seconds a pass over the data runs before it gets a progress bar of its own (chunks done, rows/s, time left) with
#: ``progress=True``: long passes show how far they are, short ones do not flicker.
PASS_BAR_DELAY_SECONDS = 2.0
#: Seconds the end of a pass waits for block reports still on their way from worker processes (they normally arrive
#: before the results, travelling through the scheduler ahead of the tasks' completion).
LATE_REPORT_SECONDS = 0.2

# -- storage: input blocks and outputs ----------------------------------------------------------------------------

#: Bytes (as floats) a block is aimed at when daskmeans chooses the row chunking of an input.
TARGET_BLOCK_BYTES = 64 * 2**20
#: Bytes under which Zarr chunks are merged into larger blocks, so that per-task overhead stays small.
MIN_BLOCK_BYTES = 8 * 2**20
#: Fewest blocks an input whose row chunking daskmeans chooses (a NumPy array, a ``.npy``/``.npz`` file) is cut into,
#: so that a small input keeps the threads of a few workers busy; decided from the shape alone, so that results never
#: depend on the cluster.
MIN_CHOSEN_BLOCKS = 8
#: Fewest rows of a block whose size daskmeans chooses (tiny tasks cost more in scheduling than they compute).
MIN_CHOSEN_BLOCK_ROWS = 1024

#: Bytes (as computed, float32/float64) of the slabs of rows in which a pass walks each stored chunk: a task holds the
#: chunk as stored plus one converted slab and the kernels' temporaries for it, whatever the chunk size. Sums that a
#: kernel accumulates row by row carry over from slab to slab (same result as one call); the summary pass's mean and
#: variance are combined per slab, so they can change in the last bits with it.
SLAB_BYTES = 8 * 2**20

# -- kernels: memory per call -------------------------------------------------------------------------------------

#: Center coordinates (``k * d``) up to which nearest-center assignment runs a direct loop instead of BLAS, which
#: costs more than it saves on so little work.
ASSIGN_DIRECT_LIMIT = 256
#: Rows per GEMM tile of nearest-center assignment against one group of centers (no group bounds). The tile's scores
#: are laid out center by center, so that one Numba pass finds every row's best two and settles the rows while the
#: tile is still in cache.
ONE_GROUP_TILE_ROWS = 512
#: Bytes of the GEMM score matrix that nearest-center assignment holds at once (its memory bound).
ASSIGN_SLAB_BYTES = 8 * 2**20
#: Bytes of stored rows per tile of nearest-center assignment without bounds in float32
#: (:mod:`daskmeans.kernels.panel_scan`, scores never written): the tile's rows are settled together after their
#: scan, while they are in the L2 cache.
PANEL_TILE_BYTES = 512 * 2**10
#: Most features per row for the panel scan (``PANEL_TILE_BYTES``): a panel of 32 float32 rows must fit the L1 cache;
#: wider rows use BLAS tiles, which are faster there.
PANEL_MAX_FEATURES = 256
#: How float32 rows are scored: by the panel scan (``"panels"``), by BLAS tiles (``"blas"``), or by the faster of the
#: two on this processor, measured once per process and number of features (``"auto"``,
#: :func:`daskmeans.kernels.one_group_assign.panels_pay`). The results are the same to the last bit either way.
PANEL_SCAN = "auto"
#: Rows and centers of the measurement that ``PANEL_SCAN="auto"`` makes.
PANEL_CALIBRATION_ROWS = 4096
PANEL_CALIBRATION_CENTERS = 512
#: Bytes of one GEMM tile of scores in nearest-center assignment: small enough that the reductions after the GEMM
#: (argmin, second best, group minima) read it from the L2 cache (2 MiB is 512 rows at k = 1000 in float32).
ASSIGN_TILE_BYTES = 2 * 2**20
#: Fewest rows per GEMM tile of nearest-center assignment (at large k a tile of a few rows runs far below the BLAS
#: rate).
ASSIGN_MIN_TILE_ROWS = 64
#: Centers whose scores nearest-center assignment computes at a time (whole slots of the groups) once there are at
#: least four times as many centers: a tile of all k centers' scores would hold too few rows for the BLAS rate.
ASSIGN_COLUMN_BLOCK = 2048
#: Bytes of scores per tile when the centers are taken ``ASSIGN_COLUMN_BLOCK`` at a time.
ASSIGN_BLOCKED_TILE_BYTES = 4 * 2**20
#: Bytes of one slab of kernel values (rows x support rows) that kernel k-means holds at once.
KERNEL_CENTERS_SLAB_BYTES = 32 * 2**20
#: Multiply-adds (``b (M + b) d``, M support rows) from which a mini-batch kernel k-means step splits the batch's
#: kernel blocks over two of the driver's threads (one BLAS thread each); smaller steps run in one thread.
KERNEL_STEP_SPLIT_WORK = 2**22
#: Steps over which the VRKM inner loop measures its cost per step (``InnerLoop.run(max_cost=...)``).
VRKM_COST_WINDOW = 512
#: Bytes of one slab of the GEMM scores when VRKM makes its candidate lists.
VRKM_SLAB_BYTES = 8 * 2**20
#: Centers per group, about, of yinyang bounds (``bounds="yinyang"``, or ``"auto"`` choosing it).
YINYANG_GROUP_SIZE = 10
#: Fewest groups of yinyang bounds (groups of at least ``YINYANG_MIN_GROUP_SIZE`` centers): at a few hundred
#: centers, groups of ``YINYANG_GROUP_SIZE`` leave bounds too loose to skip rows in the first iterations (more
#: groups are more bounds per row, within the memory limits of ``bounds="auto"``). More groups than this cost more
#: than they skip: every revisit reads and writes each row's bounds, and at ``k = 256`` groups of 8 centers fill
#: half the vector lanes of the grouped revisit (:func:`daskmeans.kernels.revisit.scores_by_groups`) where groups of
#: 4 are scored one center at a time.
YINYANG_MIN_GROUPS = 32
#: Fewest centers of a yinyang group that ``YINYANG_MIN_GROUPS`` makes: at ``k = 64`` or 128, groups of 8 centers
#: take less time than smaller ones or Elkan's bound per center (which skip a few more distances, but every revisit
#: reads and writes all their bounds).
YINYANG_MIN_GROUP_SIZE = 8
#: Rows at the start of a block that are revisited first after the centers moved (exact k-means with bounds,
#: nmbatch), to decide whether revisiting the rest pays (``REVISIT_GIVE_UP_FRACTION``).
REVISIT_PROBE_ROWS = 2048
#: Fraction of all their distances: when the probe rows needed more than this, the rest of the block is reassigned
#: against all centers by GEMM with fresh bounds, which is then cheaper than revisiting it.
REVISIT_GIVE_UP_FRACTION = 0.5
#: Rows revisited together in float32 with groups (:func:`daskmeans.kernels.revisit._revisit_by_groups`): their
#: candidates are scored group by group, each group's centers read once for all its rows.
REVISIT_BLOCK_ROWS = 1024
#: Most (row, chunk) pairs the buffers of one revisited block hold; fewer rows are revisited together when the groups
#: have more than ``REVISIT_BLOCK_PAIRS / REVISIT_BLOCK_ROWS`` chunks.
REVISIT_BLOCK_PAIRS = 2**17
#: Most (best, candidate) cluster pairs (``k^2``) that truncated EM counts in a dense array; with more clusters the
#: pairs found are sorted and counted instead.
DENSE_PAIRS_LIMIT = 2**22

# -- passes: per-task work ----------------------------------------------------------------------------------------

#: Farthest rows each block of the assign pass reports at least, as candidates to refill empty clusters
#: (:func:`daskmeans.passes.assign.far_rows`): ``N_FAR``, or one per ``N_FAR_PER_CLUSTERS`` clusters when that is
#: more, at most ``N_FAR_MAX``. An iteration with more empty clusters than far rows runs its pass again for enough
#: of them.
N_FAR = 32
#: Clusters per far row each block reports when that gives more than ``N_FAR`` rows (see ``N_FAR``).
N_FAR_PER_CLUSTERS = 8
#: Most far rows a block reports (see ``N_FAR``).
N_FAR_MAX = 1024
#: Rows one mini-batch pool of steps holds (batch_size x steps), about 64 MiB of float32 rows at d = 128.
POOL_ROWS = 2**17
#: Fewest whole blocks one mini-batch pool reads with ``sampling="chunks"``, so that the rows of a pool mix that
#: many parts of the data.
MIN_POOL_BLOCKS = 8
#: With ``sampling="chunks"``, a pool reads blocks holding at least this many times its rows (a factor), and draws
#: its rows from them with replacement.
POOL_BLOCK_OVERSAMPLING = 2
#: Mini-batch ``sampling="auto"`` takes whole blocks when drawing rows uniformly would read at least this many
#: times more blocks per pool (a factor).
CHUNK_SAMPLING_MIN_SAVING = 4
#: Fewest rows each half of a nested mini-batch state block must keep for the block to be split.
MIN_BLOCK_ROWS = 4096
#: Fewest rows a growth of the nested mini-batch cut short by ``max_time`` adds (rows): a smaller growth is not
#: worth reading the chunks it touches, and the iteration revisits the batch it has instead.
MIN_GROWTH_ROWS = 4096
#: Most lanes the chunks are dealt to in nested mini-batch (the first batches mix this many chunks).
MAX_LANES = 64
#: Multiply-adds (``rows x k x d``) of a full assignment up to which ``driver_rows="auto"`` (exact k-means, nmbatch)
#: steps the rows on the driver of a cluster: below it, a round trip to the workers costs more than the work.
DRIVER_WORK = 4 * 10**9
#: Multiply-adds (``rows x k x d``) of a full assignment up to which ``driver_rows="auto"`` (exact k-means, nmbatch's
#: batches) steps the rows on the driver when the cluster's workers run no more threads than the driver has cores (a
#: local cluster): such workers compute no faster than the driver, so larger passes gain from the round trips saved
#: (300,000 descriptors at k = 4,096 included; on larger data ``DRIVER_BYTES`` is the bound).
DRIVER_WORK_FEW_THREADS = 2 * 10**11
#: Bytes of the driver's memory that the rows stepped there and their state (labels, distances, bounds) may take.
DRIVER_BYTES = 256 * 2**20

# -- algorithms ---------------------------------------------------------------------------------------------------

#: Fewest clusters for which exact k-means with ``algorithm="auto"`` keeps distance bounds: below, Lloyd's full GEMM
#: pass costs little more than checking bounds.
BOUNDS_MIN_CLUSTERS = 8
#: Fraction of the cluster's memory (of the memory available to this process on the threaded scheduler) that the
#: per-row state of distance bounds (rows as computed, labels, distances, bounds) may take with ``algorithm="auto"``.
BOUNDS_MEMORY_FRACTION = 0.5
#: Iterations that exact k-means with ``algorithm="auto"`` runs without bounds before the bounds start: bounds made
#: while the centers move most rule out next to nothing and cost more than a plain pass to make.
AUTO_PLAIN_ITERATIONS = 2
#: Markov chain length of ``init="afk-mc2"`` (Bachem et al. 2016 find 20 enough on most data).
AFKMC2_CHAIN_LENGTH = 20
#: Candidates per center (a factor) that ``init="afk-mc2"`` draws before keeping the centers by weighted greedy
#: k-means++ on them, each weighted by the chains' proposals nearest to it: D^2 sampling alone leaves some
#: well-separated clusters without a center.
AFKMC2_OVERSAMPLING = 2.0
#: Bytes up to which weighted greedy k-means++ on AFK-MC2's candidates computes the matrix of their squared distances
#: once by GEMM and then only looks distances up (128 MiB: 4,096 candidates).
GREEDY_DISTANCE_MATRIX_BYTES = 128 * 2**20
#: Rows up to which ``init="k-means||"`` looks at every row of the data (or ``KMEANS_PARALLEL_ROWS_PER_CENTER * k``
#: when that is more); larger data is seeded from a uniform sample of that many rows, drawn in one pass and held by
#: the workers, since every round measures each row it looks at against about 2 k new candidates.
KMEANS_PARALLEL_MIN_ROWS = 2**20
#: Rows per center that ``init="k-means||"`` looks at, at least (see ``KMEANS_PARALLEL_MIN_ROWS``).
KMEANS_PARALLEL_ROWS_PER_CENTER = 256
#: Fraction of the workers' memory that the rows k-means|| samples (as stored, with
#: ``KMEANS_PARALLEL_STATE_BYTES`` each) may take: wide rows get a smaller sample.
KMEANS_PARALLEL_MEMORY_FRACTION = 1 / 8
#: Bytes of k-means|| state per row it looks at: the squared distance to the nearest candidate and its index.
KMEANS_PARALLEL_STATE_BYTES = 12
#: Rows per block of a sample held by the workers (:mod:`daskmeans.passes.row_sample`).
ROW_SAMPLE_BLOCK_ROWS = 2**16
#: Bytes of the largest slab of the candidates-to-centers distance matrix when k-means|| reclusters its candidates.
RECLUSTER_SLAB_BYTES = 8 * 2**20
#: Rows sampled per center for each k-means on a sample of ``init="two-level"`` (the coarse level on the driver, each
#: fine problem on a worker), as faiss's ``max_points_per_centroid``.
TWO_LEVEL_POINTS_PER_CENTER = 256
#: Most Lloyd iterations of the coarse k-means of ``init="two-level"`` (on its sample, on the driver) and of the lists
#: of ``predict(X, n_probe=...)``, after their k-means++ seeding: a coarse level only cuts the data into cells, which
#: later iterations barely move; with 10 or fewer, a cluster of the data can be left without a center.
TWO_LEVEL_LLOYD_ITER = 15
#: Most Lloyd iterations of each fine k-means of ``init="two-level"`` (one per coarse cluster, on the workers), after
#: its k-means++ seeding: fewer than the coarse level's, since a fine problem holds a few rows per center and nearly
#: settles within them, and the fit's own iterations refine every center after it.
TWO_LEVEL_FINE_LLOYD_ITER = 6
#: Candidates that greedy k-means++ tries per center in each fine k-means of ``init="two-level"`` (the coarse level
#: tries ``2 + log k``, as scikit-learn): the candidates' distances cost as much as a Lloyd iteration per candidate,
#: and the iterations that follow make up for most of what fewer candidates leave.
TWO_LEVEL_FINE_TRIALS = 4
#: Most first-level merge tasks of the fine samples' pass of ``init="two-level"`` (batches of coarse clusters times
#: groups of ``SPLIT_EVERY`` blocks); more coarse clusters than that allows are batched together.
TWO_LEVEL_MAX_MERGE_TASKS = 2**14
#: Seed of the k-means that groups the fitted centers into lists for ``predict(X, n_probe=...)``, fixed so that the
#: approximate labels depend on the centers alone.
COARSE_INDEX_SEED = 0
#: Fewest segments an epoch's sample streams in for VRKM (the unit in which candidate lists are remade).
MIN_SEGMENTS = 8
#: VRKM remakes its candidate lists once a step needs this many times more distances than a list holds (a factor).
REMAKE_COST = 4
#: Bytes of VRKM's epoch sample (the drawn rows as stored with their labels, positions and candidate lists) read in
#: one pass: a longer epoch streams through its inner loop a pool of draws at a time, the first pool read with the
#: epoch's pass and each other by a read of the blocks its draws fall in, so that no worker (nor the driver) holds
#: more than two pools whatever the data's size. No result depends on it.
VRKM_POOL_BYTES = 64 * 2**20
#: Bytes of batch rows that mini-batch kernel k-means gathers from the workers per round trip.
POOL_BYTES = 64 * 2**20
#: Bytes of stored rows up to which mini-batch kernel k-means with ``driver_rows="auto"`` copies the data into the
#: driver (no more than one pool of batch rows would bring), whose threads then draw the batches and find the
#: training rows' labels without a pass of the workers.
KERNEL_DRIVER_BYTES = POOL_BYTES
#: Rows the seeding sample of kernel k-means holds by default (at least 20 per cluster).
INIT_SAMPLE_ROWS = 5000
#: Coreset rows up to which vc-GMM iterates on the driver; larger coresets are iterated on the Dask workers.
GMM_DRIVER_MAX_ROWS = 200_000
#: Most rows per vc-GMM E-step block (the unit of work, on the driver as on the workers).
GMM_BLOCK_ROWS = 20_000
#: Blocks that vc-GMM cuts a smaller coreset into, so that each thread of the driver (or of a small cluster) gets
#: one; the count depends on the coreset alone, so the result does not depend on the machine.
GMM_MIN_BLOCKS = 4
#: Fewest rows per vc-GMM E-step block: below, a block's task costs more to schedule than to run.
GMM_MIN_BLOCK_ROWS = 2000
#: Most initial E-steps (without M-step) of vc-GMM before its first M-step.
MAX_INITIAL_ESTEPS = 20
#: Relative improvement of the weighted sum of nearest distances under which vc-GMM stops its initial E-steps.
INITIAL_ESTEP_RTOL = 0.01

# -- estimators: defaults derived from the data -------------------------------------------------------------------

#: Multiple of ``n_clusters / n_samples`` that ``VRKMeans(learning_rate="auto")`` takes (lowered where needed so
#: that the learning rate stays at most 0.5).
AUTO_LEARNING_RATE = 4.0
#: Default ``VRKMeans(inner_batch_size=...)``: draws of the inner loop whose nearest centers one GEMM finds. Batches
#: of 256 to 4096 draws reach the same energies epoch by epoch, and the GEMM makes the loop several times faster
#: than the per-sample loop.
VRKM_INNER_BATCH_SIZE = 1024
#: Rows per component of ``CoresetGaussianMixture(coreset_size="auto")``: the vc-GMM study's error falls with the
#: rows per component, and at 100 it is a few percent above k-means++ on all rows while the fit stays far shorter.
AUTO_CORESET_PER_COMPONENT = 100
#: Fewest rows of ``CoresetGaussianMixture(coreset_size="auto")`` (never more than the data has).
AUTO_CORESET_MIN = 10_000
#: Most bytes (in the dtype the data is computed in) of the rows of ``CoresetGaussianMixture(coreset_size="auto")``:
#: the coreset is gathered on the driver, so at large ``n_components`` it holds fewer rows per component rather than
#: outgrow the driver's memory.
AUTO_CORESET_MAX_BYTES = 2**30
#: Largest n that ``KernelKMeans`` accepts by default (``max_samples``): its kernel matrix takes ``4 n^2`` bytes.
MAX_FULL_BATCH_SAMPLES = 50_000

# -- datasets and memory model ------------------------------------------------------------------------------------

#: Bytes (as float32) that ``make_blobs_zarr`` aims its Zarr chunks at (what each block costs once read).
TARGET_CHUNK_BYTES = 8 * 2**20
#: Noise values per generation block of ``make_blobs_zarr`` (its rows: this divided by ``n_features``): small enough
#: that a chunk which starts inside a block redraws little, large enough that seeding a generator is cheap.
GENERATION_BLOCK_VALUES = 2**16
#: Memory model: bytes of per-row vectors an assign task keeps for its block: labels (4), squared distances (8), the
#: rows' squared norms and the running best score (8 + 8), the winners of a slab (8).
PER_ROW_BYTES = 36
#: Memory model: bytes of slack for the allocator (freed blocks not yet returned to the OS) and Dask's per-task
#: bookkeeping.
ALLOCATOR_SLACK = 48 * 2**20


# -- changing settings --------------------------------------------------------------------------------------------

#: Each setting's default: its value when the module was imported.
_defaults: dict[str, Any] = {
    name: copy.deepcopy(value) for name, value in globals().items() if name.isupper() and not name.startswith("_")
}


def _check_name(name: str) -> None:
    if name not in _defaults:
        close = difflib.get_close_matches(str(name), _defaults, n=1)
        hint = f" Did you mean {close[0]}?" if close else " The settings are listed in daskmeans.config."
        raise InvalidParameterError(f"daskmeans.config has no setting {name!r}.{hint}")


def _checked(name: str, value):
    """``value`` as setting ``name`` takes it (an int, a float, a tuple or a dict like its default); TypeError
    otherwise."""
    default = _defaults[name]
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        kind = numbers.Integral if isinstance(default, int) else numbers.Real
        ok = isinstance(value, kind) and not isinstance(value, bool)
    elif isinstance(default, (tuple, dict)):
        ok = isinstance(value, (tuple, list) if isinstance(default, tuple) else Mapping)
    else:
        ok = isinstance(value, type(default))
    value = type(default)(value) if ok else value
    if not ok:
        raise TypeError(
            f"daskmeans.config.{name} takes a value of type {type(default).__name__} (its default is "
            f"{default!r}), got {value!r} of type {type(value).__name__}."
        )
    return value


def get(name: str):
    """The current value of setting ``name``.

    Parameters
    ----------
    name : str
        A setting of this module, e.g. ``"SLAB_BYTES"``.

    Raises
    ------
    InvalidParameterError
        ``name`` is not a setting.

    Examples
    --------
    >>> from daskmeans import config
    >>> config.get("SPLIT_EVERY")
    8
    """
    _check_name(name)
    return globals()[name]


class set:  # noqa: N801 - named as dask.config.set, which it mirrors
    """Change settings: for the rest of the process (a plain call), or for a block of code (a context manager,
    which restores the values they had before on leaving the block, whatever happens in it).

    Every name and value is checked before any is changed.

    Parameters
    ----------
    **settings
        ``NAME=value`` for settings of this module; a value of the default's type (an int where the default is
        an int, a number where it is a float, ...).

    Raises
    ------
    InvalidParameterError
        A name that is not a setting.
    TypeError
        A value of the wrong type.

    Notes
    -----
    The settings are the module's variables, shared by every thread of the process: a change made in one thread
    is seen by all. Tasks carry the changed settings to worker processes (see the module's documentation).

    Examples
    --------
    >>> from daskmeans import config
    >>> with config.set(SLAB_BYTES=2**20):
    ...     config.SLAB_BYTES
    1048576
    >>> config.SLAB_BYTES == 8 * 2**20
    True
    """

    def __init__(self, **settings):
        for name in settings:
            _check_name(name)
        values = {name: _checked(name, value) for name, value in settings.items()}
        namespace = globals()
        self._previous = {name: namespace[name] for name in values}
        namespace.update(values)

    def __enter__(self) -> set:
        return self

    def __exit__(self, *exc_info) -> None:
        globals().update(self._previous)


def reset(*names: str) -> None:
    """Give settings their default values back: those named, or every setting when none is named.

    Raises
    ------
    InvalidParameterError
        A name that is not a setting.

    Examples
    --------
    >>> from daskmeans import config
    >>> _ = config.set(POOL_ROWS=2**10)
    >>> config.reset("POOL_ROWS")
    >>> config.POOL_ROWS
    131072
    """
    for name in names:
        _check_name(name)
    globals().update({name: copy.deepcopy(_defaults[name]) for name in (names or _defaults)})


def defaults() -> dict[str, Any]:
    """Every setting's default value, by name (a copy)."""
    return copy.deepcopy(_defaults)


# -- settings carried by tasks ------------------------------------------------------------------------------------

#: This process, as tasks name the process their graph was built in (a forked process has another pid).
_process_token = uuid.uuid4().hex


def _this_process() -> tuple[int, str]:
    return os.getpid(), _process_token


def carried() -> tuple | None:
    """What a task built now carries to the process that runs it: this process and the settings that differ from
    their defaults here, as ``(process, ((name, value), ...))``; None when every setting has its default.

    :func:`daskmeans.engine.graph.task` and the other builders of daskmeans' tasks read it once per graph, and the
    task applies it with :func:`applied` where it runs.
    """
    namespace = globals()
    changed = tuple((name, namespace[name]) for name, default in _defaults.items() if namespace[name] != default)
    return (_this_process(), changed) if changed else None


#: Settings applied by running tasks in this process: the ones applied, how many tasks run with them, and the
#: values they replaced.
_applied_state = {"settings": None, "count": 0, "replaced": {}}
_applied_changed = threading.Condition()


@contextmanager
def applied(settings: tuple | None) -> Iterator[None]:
    """Run a block with the settings a task carries (:func:`carried`); nothing to do in the process that built
    the task, or when it carries none.

    The settings are set for as long as some task runs with them in this process and restored after the last;
    a task carrying other settings waits until those tasks end (a worker serves one client's settings at a time).
    """
    if settings is None or settings[0] == _this_process():
        yield
        return
    items = settings[1]
    with _applied_changed:
        while _applied_state["count"] and _applied_state["settings"] != items:
            _applied_changed.wait()
        if not _applied_state["count"]:
            namespace = globals()
            _applied_state["replaced"] = {name: namespace[name] for name, _ in items}
            namespace.update(items)
            _applied_state["settings"] = items
        _applied_state["count"] += 1
    try:
        yield
    finally:
        with _applied_changed:
            _applied_state["count"] -= 1
            if not _applied_state["count"]:
                globals().update(_applied_state["replaced"])
                _applied_state["settings"], _applied_state["replaced"] = None, {}
                _applied_changed.notify_all()


def run_with(settings: tuple | None, function, *args, **kwargs):
    """``function(*args, **kwargs)`` with the settings a task carries applied (:func:`applied`): the function of
    a task whose graph was built with settings changed."""
    with applied(settings):
        return function(*args, **kwargs)
