"""One module per algorithm (``lloyd``, ``vrkm``, ``nested``, ``minibatch``, ``vc_gmm``, ``kernel_kmeans``), plus
the seeding (``init``; ``two_level`` for large k; ``sample_kmeans``: k-means++ and Lloyd on points in memory), the
coreset draw (``coreset``), empty-cluster relocation (``relocation``) and the plans' base (``plan``).

Every algorithm takes the prepared problem: its data, its initial centers, its plan (a frozen
:class:`~daskmeans.algorithms.plan.FitPlan` of the choices made for the data, each with its reason) and one
:class:`~daskmeans.algorithms.result.RunContext` (clock, client, progress callback, checkpoint hook, weights). It
carries what lives across iterations as one state object, orchestrates passes and Numba kernels, and returns one
:class:`~daskmeans.algorithms.result.FitResult`. It never decides again what its plan decided. Nothing here knows
the estimators."""
