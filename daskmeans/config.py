"""Every tunable of daskmeans in one place: slab and block sizes, pool sizes, driver limits, default rules.

These are not parameters of any estimator: they bound memory per task and set the grain of the work, and no
result depends on them beyond floating-point summation order where said. Each is documented where it is set.
Modules read them at import time (``from daskmeans.config import NAME``); to change one for a run, set it
before importing the module that uses it.
"""

from __future__ import annotations

# -- engine: task graphs ------------------------------------------------------------------------------------------

#: Partial results one combine task of a tree reduction merges (the tree's fan-in). The order in which sums are
#: combined follows from it, so results can change in the last bits when it changes.
SPLIT_EVERY = 8
#: A driver-side array passed to every block task of a pass (centers, shifts) travels inside each task up to this
#: size, and as one task of its own, transferred between workers, above it (:func:`daskmeans.engine.graph.shared`).
SHARED_INLINE_BYTES = 256 * 2**10
#: A tree reduction whose last combine takes at most this many bytes of partial results (as its pass estimates
#: them) runs that combine on the driver, saving a dispatch and a transfer between workers per pass
#: (:func:`daskmeans.engine.graph.tree_reduce`).
DRIVER_COMBINE_BYTES = 4 * 2**20
#: After a write task fails on a cluster, the most seconds to wait for the other writes still executing to end
#: before the error is raised (and the output's temporary folder removed), and how often to look
#: (:func:`daskmeans.engine.writes.compute_writes`).
WRITES_SETTLE_SECONDS = 120.0
WRITES_POLL_SECONDS = 0.05
#: After a failed write into a temporary output, the most seconds to wait for Zarr's I/O still under way in this
#: process before the output is removed (:func:`daskmeans.storage.zarr_safe.settle_zarr_io`).
ZARR_SETTLE_SECONDS = 10.0
#: Seconds to wait for a scheduler before giving up (``connect``, the CLI's ``--connect-timeout`` default).
CONNECT_TIMEOUT_SECONDS = 10.0
#: Seconds beyond the connect timeout that ``connect`` waits for a scheduler's handshake before calling the address
#: silent: the grace lets a connection that failed outright (refused, no route) be reported as such instead.
CONNECT_HANDSHAKE_GRACE_SECONDS = 1.0
#: Without --scheduler, a command on an input (as computed) up to this size runs on a local cluster of threads in
#: its own process, which starts in under a second; a larger input gets worker processes (several seconds to start).
LOCAL_THREADS_MAX_BYTES = 2**30
#: ``--local-workers``: what runs the tasks when no scheduler is given (:class:`daskmeans.engine.cluster.ClusterSpec`).
LOCAL_WORKERS = ("auto", "processes", "threads", "scheduler")
#: glibc's allocator settings for the worker processes of the embedded cluster, in place of Dask's
#: ``MALLOC_TRIM_THRESHOLD_=65536`` (which returns every freed array over 128 KiB to the kernel at once): arrays up
#: to 32 MiB come from the process's heap, and up to 128 MiB of free heap is kept for the next iteration's arrays.
#: Memory given back is fresh pages when touched again, ~1.7 ms per MB on a VM whose host reclaims idle guest
#: memory: KDD k = 200 with bounds, 67-75 -> 57-58 ms per iteration; descriptors 5% (session 22, 2 processes, an ad
#: hoc script's median iterations, not the bench).
#: Left alone when the user's Dask configuration sets its own ``MALLOC_TRIM_THRESHOLD_``.
WORKER_MALLOC_ENVIRON = {"MALLOC_MMAP_THRESHOLD_": 2**25, "MALLOC_TRIM_THRESHOLD_": 2**27}
#: With ``progress=True``, a pass over the data gets a bar of its own (chunks done, rows/s, time left) once it has
#: run this many seconds: long passes show how far they are, short ones do not flicker.
PASS_BAR_DELAY_SECONDS = 2.0
#: Seconds the end of a pass waits for block reports still on their way from worker processes (they normally
#: arrive before the results: they travel through the scheduler ahead of the tasks' completion).
LATE_REPORT_SECONDS = 0.2

# -- storage: input blocks and outputs ----------------------------------------------------------------------------

#: Blocks are aimed at this many bytes (as floats) when daskmeans chooses the row chunking of an input.
TARGET_BLOCK_BYTES = 64 * 2**20
#: Zarr chunks smaller than this are merged into larger blocks, so that per-task overhead stays small.
MIN_BLOCK_BYTES = 8 * 2**20
#: An input whose row chunking daskmeans chooses (a NumPy array, a ``.npy``/``.npz`` file) is cut into at least this
#: many blocks, so that a small input keeps the threads of a few workers busy (kdd, 43 MB, was one block: one thread
#: worked, the others waited); from the shape alone, so that results never depend on the cluster ...
MIN_CHOSEN_BLOCKS = 8
#: ... but never into blocks of fewer rows than this (tiny tasks cost more in scheduling than they compute).
MIN_CHOSEN_BLOCK_ROWS = 1024

#: A pass walks each stored chunk in slabs of rows of about this many bytes as computed (float32/float64):
#: a task holds the chunk as stored plus one converted slab and the kernels' temporaries for it, whatever the
#: chunk size. Sums that a kernel accumulates row by row carry over from slab to slab (same result as one call);
#: the summary pass's mean and variance are combined per slab, so they can change in the last bits with it.
SLAB_BYTES = 8 * 2**20

# -- kernels: memory per call -------------------------------------------------------------------------------------

#: Nearest-center assignment: below this many center coordinates (``k * d``) a direct loop beats BLAS.
ASSIGN_DIRECT_LIMIT = 256
#: Nearest-center assignment against one group of centers (no group bounds): rows per GEMM tile, whose scores are
#: laid out center by center so that one Numba pass finds every row's best two (vectorized over the rows) and then
#: settles the rows while the tile is in cache (measured on one thread: 512 rows beat 128, 256 and 2048 on MNIST,
#: kdd and descriptors at k = 50, 200 and 1000).
ONE_GROUP_TILE_ROWS = 512
#: Nearest-center assignment: most bytes of the GEMM score matrix held at once (the memory bound).
ASSIGN_SLAB_BYTES = 8 * 2**20
#: Nearest-center assignment without bounds in float32 (scores never written, :mod:`daskmeans.kernels.panel_scan`):
#: bytes of stored rows per tile, settled together after their scan while they are in the L2 cache.
PANEL_TILE_BYTES = 512 * 2**10
#: ... for rows of at most this many features, whose panel (32 rows in float32) fits the L1 cache: with more
#: (MNIST's 784) BLAS tiles were faster at every k from 10 to 1000 (0.63-0.83x on one thread in session 35).
PANEL_MAX_FEATURES = 256
#: Nearest-center assignment: bytes of one GEMM tile of scores, small enough that the reductions after the GEMM
#: (argmin, second best, group minima) read it from the L2 cache ... (2 MiB: 512 rows at k = 1000 in float32; in
#: session 30, yinyang's full assignment of 40,000 SIFT descriptors in 100 groups took 119-124 ms on one thread
#: against 134-136 ms with 1 MiB, the same on kdd and MNIST)
ASSIGN_TILE_BYTES = 2 * 2**20
#: ... but at least this many rows per GEMM (at large k a tile of a few rows runs far below the BLAS rate).
ASSIGN_MIN_TILE_ROWS = 64
#: ... and with at least four times this many centers, scores are computed about this many centers (whole slots
#: of the groups) at a time (a tile of all k centers' scores would hold too few rows for the BLAS rate) ...
ASSIGN_COLUMN_BLOCK = 2048
#: ... in tiles of about this many bytes of scores.
ASSIGN_BLOCKED_TILE_BYTES = 4 * 2**20
#: Kernel centers: bytes of one slab of kernel values (rows x support rows) held at once.
KERNEL_CENTERS_SLAB_BYTES = 32 * 2**20
#: Mini-batch kernel k-means steps: the batch's kernel blocks are split over two of the driver's threads (one BLAS
#: thread each) from this many multiply-adds (``b (M + b) d``, M support rows) on; smaller ones run in one thread.
KERNEL_STEP_SPLIT_WORK = 2**22
#: VRKM inner loop: steps over which it measures its cost per step (``InnerLoop.run(max_cost=...)``).
VRKM_COST_WINDOW = 512
#: VRKM candidate lists: bytes of one slab of the GEMM scores.
VRKM_SLAB_BYTES = 8 * 2**20
#: Nested mini-batch, ``bounds="yinyang"`` (or ``"auto"`` choosing it): centers per group, about.
YINYANG_GROUP_SIZE = 10
#: Revisiting rows after the centers moved (exact k-means with bounds, nmbatch): a block's first rows are revisited
#: first; when they needed more than ``REVISIT_GIVE_UP_FRACTION`` of all their distances, the rest of the block is
#: reassigned against all centers by GEMM with fresh bounds (cheaper then).
REVISIT_PROBE_ROWS = 2048
REVISIT_GIVE_UP_FRACTION = 0.5
#: Rows revisited together in float32 with groups (:func:`daskmeans.kernels.revisit._revisit_by_groups`): their
#: candidates are scored group by group, each group's centers read once for all its rows; fewer where the groups
#: have more than ``REVISIT_BLOCK_PAIRS / REVISIT_BLOCK_ROWS`` chunks (the block's buffers hold one pair per row
#: and chunk).
REVISIT_BLOCK_ROWS = 1024
REVISIT_BLOCK_PAIRS = 2**17
#: Truncated EM: up to this many (best, candidate) pairs (``k^2``) are counted in a dense array.
DENSE_PAIRS_LIMIT = 2**22

# -- passes: per-task work ----------------------------------------------------------------------------------------

#: Assign pass: each block reports its farthest rows, the candidates to refill empty clusters: ``N_FAR``, or one per
#: ``N_FAR_PER_CLUSTERS`` clusters when that is more (at most ``N_FAR_MAX``; :func:`daskmeans.passes.assign.far_rows`).
#: An iteration with more empty clusters than far rows runs its pass again for enough of them: with 32 far rows the
#: second Lloyd iteration from random rows emptied 55 of 1,000 clusters (400,000 synthetic descriptors), and the
#: 100 M-row record's second iteration took two passes.
N_FAR = 32
N_FAR_PER_CLUSTERS = 8
N_FAR_MAX = 1024
#: Mini-batch pool: rows one pool of steps holds (batch_size x steps), about 64 MiB of float32 rows at d = 128.
POOL_ROWS = 2**17
#: Mini-batch, ``sampling="chunks"``: a pool of steps reads whole blocks, at least this many (the rows of a pool
#: mix that many parts of the data) ...
MIN_POOL_BLOCKS = 8
#: ... and enough to hold this many times the pool's rows (its rows are drawn, with replacement, from those read).
POOL_BLOCK_OVERSAMPLING = 2
#: Mini-batch, ``sampling="auto"``: whole blocks when drawing rows uniformly would read at least this many times
#: more blocks per pool.
CHUNK_SAMPLING_MIN_SAVING = 4
#: Nested mini-batch: a state block of the active batch is split only while both halves keep this many rows.
MIN_BLOCK_ROWS = 4096
#: Nested mini-batch: most lanes the chunks are dealt to (the first batches mix this many chunks).
MAX_LANES = 64
#: ``driver_rows="auto"`` (exact k-means, nmbatch): on a cluster, rows are stepped on the driver while assigning
#: all of them to every center takes at most this many multiply-adds (``rows x k x d``: MNIST at k = 50 and KDD at
#: k = 200 are 2.7 and 2.2 x 10^9, about 40-80 ms on a driver of two cores; with bounds, an iteration after the first
#: computes a tenth to a third of that, about one round trip to worker processes) ...
DRIVER_WORK = 4 * 10**9
#: Nested mini-batch on a cluster whose workers run no more threads than the driver has cores (a local cluster):
#: the driver steps batches of up to this many multiply-adds (``rows x k x d``). Measured on descriptors (k = 1000,
#: 2 worker processes of one thread, 2 cores, session 31, 3 alternating ad hoc pairs; the iterates are the same):
#: iteration 10 at 2.99-3.07 s against 3.45-3.62 s with ``DRIVER_WORK``, iteration 16 unchanged within noise
#: (10.10-10.53 s against 10.17-10.80 s). 80,000 and 160,000 rows gained less, and 700,000 lost (at 640,000 rows an
#: iteration on the driver took 1.31 s against 1.18 s on the workers, and moving the batch there cost more).
DRIVER_WORK_FEW_THREADS = 5 * 10**10
#: ... and their state (rows, labels, distances, bounds) takes at most this many bytes of the driver's memory.
DRIVER_BYTES = 256 * 2**20

# -- algorithms ---------------------------------------------------------------------------------------------------

#: Exact k-means, ``algorithm="auto"``: distance bounds only from this many clusters on (below, Lloyd's full GEMM
#: pass costs little more than checking bounds).
BOUNDS_MIN_CLUSTERS = 8
#: Exact k-means, ``algorithm="auto"``: distance bounds only while their per-row state (the rows as computed,
#: labels, distances, bounds) takes at most this fraction of the cluster's memory (of the memory available to
#: this process on the threaded scheduler).
BOUNDS_MEMORY_FRACTION = 0.5
#: Exact k-means, ``algorithm="auto"``: the first iterations run without bounds, which start at the next one. Bounds
#: made from the first centers were never of use: the second iteration computed every distance on descriptors
#: (k = 1000, yinyang), MNIST (k = 50, Elkan) and KDD (k = 200, yinyang), after a first pass that cost more than
#: Lloyd's for making them (session 27's bench records). Descriptors, 8 iterations, 2 worker processes (an ad hoc
#: script, session 29): 8.96-9.34 s with bounds from the first iteration, 8.61-8.66 s from the second, 8.26-8.36 s
#: from the third, 8.08-8.29 s from the fourth.
AUTO_PLAIN_ITERATIONS = 2
#: Markov chain length of ``init="afk-mc2"`` (Bachem et al. 2016 find 20 enough on most data).
AFKMC2_CHAIN_LENGTH = 20
#: ``init="afk-mc2"`` draws this many candidates per center and keeps the centers by weighted greedy k-means++ on
#: them, each weighted by the chains' proposals nearest to it (D^2 sampling alone leaves about 10 of 100
#: well-separated clusters without a center).
AFKMC2_OVERSAMPLING = 2.0
#: Largest matrix of the squared distances between AFK-MC2's candidates (bytes): up to this size (4,096
#: candidates), weighted greedy k-means++ on them computes it once by GEMM and then only looks distances up.
GREEDY_DISTANCE_MATRIX_BYTES = 128 * 2**20
#: ``init="k-means||"`` looks at every row of data of up to ``max(KMEANS_PARALLEL_MIN_ROWS,
#: KMEANS_PARALLEL_ROWS_PER_CENTER * k)`` rows, and at a uniform sample of that many rows of larger data (drawn in
#: one pass and held by the workers): each round of k-means|| measures every row it looks at against about 2 k new
#: candidates (twice an assign pass), which at 100 million rows and k = 1000 would take about 7 minutes a round
#: on 2 cores, against seconds on a million rows.
KMEANS_PARALLEL_MIN_ROWS = 2**20
KMEANS_PARALLEL_ROWS_PER_CENTER = 256
#: ... and at most as many sampled rows (as stored, with k-means||'s 12 bytes of state each) as fill this fraction
#: of the workers' memory (wide rows: 1,048,576 rows of 784 float32 would be 3.3 GB).
KMEANS_PARALLEL_MEMORY_FRACTION = 1 / 8
#: Bytes of k-means|| state per row it looks at: the squared distance to the nearest candidate and its index.
KMEANS_PARALLEL_STATE_BYTES = 12
#: Rows per block of a sample held by the workers (:mod:`daskmeans.passes.row_sample`).
ROW_SAMPLE_BLOCK_ROWS = 2**16
#: Largest slab of the candidates-to-centers distance matrix when k-means|| reclusters its candidates (bytes).
RECLUSTER_SLAB_BYTES = 8 * 2**20
#: ``init="two-level"``: rows sampled per center for each k-means on a sample (the coarse level on the driver, each
#: fine problem on a worker), as faiss's ``max_points_per_centroid``.
TWO_LEVEL_POINTS_PER_CENTER = 256
#: ``init="two-level"``: most Lloyd iterations of each k-means on a sample, after its k-means++ seeding (faiss's
#: default; with 10, a coarse level left one of 64 blobs without a center in 12 seeds, with 25 none in 40).
TWO_LEVEL_LLOYD_ITER = 25
#: ``init="two-level"``: most first-level merge tasks of the fine samples' pass (batches of coarse clusters times
#: groups of ``SPLIT_EVERY`` blocks); more coarse clusters than that allows are batched together.
TWO_LEVEL_MAX_MERGE_TASKS = 2**14
#: ``predict(X, n_probe=...)``: seed of the k-means that groups the fitted centers into lists (fixed, so that the
#: approximate labels depend on the centers alone).
COARSE_INDEX_SEED = 0
#: VRKM: the epoch's sample streams in at least this many segments (the unit in which candidate lists are remade).
MIN_SEGMENTS = 8
#: VRKM: remake the candidate lists once a step needs this many times more distances than a list holds.
REMAKE_COST = 4
#: Mini-batch kernel k-means: bytes of batch rows gathered from the workers per round trip.
POOL_BYTES = 64 * 2**20
#: Mini-batch kernel k-means, ``driver_rows="auto"``: data whose stored rows take at most this many bytes is copied
#: into the driver (no more than one pool of batch rows would bring), whose threads then draw the batches and find
#: the training rows' labels without a pass of the workers. Fit and labels on 2 worker processes, medians of 6 (ad
#: hoc): MNIST's 10,000 x 784 float32 (31 MB) 0.27 s against 0.30 s, PenDigits 0.117 s against 0.131 s.
KERNEL_DRIVER_BYTES = POOL_BYTES
#: Kernel k-means: rows the seeding sample holds by default (at least 20 per cluster).
INIT_SAMPLE_ROWS = 5000
#: vc-GMM: coresets with at most this many rows are iterated on the driver; larger ones on the Dask workers.
GMM_DRIVER_MAX_ROWS = 200_000
#: vc-GMM: rows per E-step block (the unit of work, on the driver as on the workers).
GMM_BLOCK_ROWS = 20_000
#: vc-GMM: initial E-steps (no M-step) at most, before the first M-step ...
MAX_INITIAL_ESTEPS = 20
#: ... stopped once the weighted sum of nearest distances improves by less than this fraction.
INITIAL_ESTEP_RTOL = 0.01

# -- estimators: defaults derived from the data -------------------------------------------------------------------

#: ``VRKMeans(learning_rate="auto")``: this multiple of ``n_clusters / n_samples`` (lowered where needed so that
#: the learning rate stays at most 0.5).
AUTO_LEARNING_RATE = 4.0
#: ``VRKMeans(inner_batch_size=...)`` default: draws of the inner loop whose nearest centers one GEMM finds. Measured
#: (MNIST k = 50, kdd k = 200, 2 worker processes): 256, 1024 and 4096 reach the same energies epoch by epoch; the
#: inner loop takes 0.10, 0.08 and 0.07 s per epoch on kdd (the per-sample loop: 0.3-0.6 s).
VRKM_INNER_BATCH_SIZE = 1024
#: ``CoresetGaussianMixture(coreset_size="auto")``: this many rows per component ...
AUTO_CORESET_PER_COMPONENT = 20
#: ... and at least this many rows (never more than the data has).
AUTO_CORESET_MIN = 10_000
#: Largest n ``KernelKMeans`` accepts by default (``max_samples``): its kernel matrix takes ``4 n^2`` bytes.
MAX_FULL_BATCH_SAMPLES = 50_000

# -- datasets and memory model ------------------------------------------------------------------------------------

#: ``make_blobs_zarr``: Zarr chunks are aimed at this many bytes as float32 (what each block costs once read).
TARGET_CHUNK_BYTES = 8 * 2**20
#: ``make_blobs_zarr``: noise values per generation block (its rows: this divided by ``n_features``). Small enough
#: that a chunk which starts inside a block redraws little, large enough that seeding a generator is cheap.
GENERATION_BLOCK_VALUES = 2**16
#: Memory model: bytes of per-row vectors an assign task keeps for its block: labels (4), squared distances (8),
#: the rows' squared norms and the running best score (8 + 8), the winners of a slab (8).
PER_ROW_BYTES = 36
#: Memory model: slack for the allocator (freed blocks not yet returned to the OS) and Dask's per-task bookkeeping.
ALLOCATOR_SLACK = 48 * 2**20
