"""One module per algorithm (``lloyd``, ``vrkm``, ``nested``, ``minibatch``, ``vc_gmm``, ``kernel_kmeans``), plus
the seeding (``init``; ``two_level`` for large k; ``sample_kmeans``: k-means++ and Lloyd on points in memory), the
coreset draw (``coreset``) and empty-cluster relocation (``relocation``).

Every algorithm takes its data, its initial centers, one :class:`~daskmeans.algorithms.result.RunContext` (clock,
client, progress callback, checkpoint hook, weights) and its own parameters, orchestrates passes and Numba
kernels, and returns one :class:`~daskmeans.algorithms.result.FitResult`. Nothing here knows the estimators."""
