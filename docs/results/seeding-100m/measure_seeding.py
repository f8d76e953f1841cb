"""k-means|| at scale: seeding time and passes on the 100M resampled descriptors, every row vs a sample.

python docs/results/seeding-100m/measure_seeding.py STORE N_ROWS MODE [K]
(MODE sample: the default k-means||; full: k-means|| on every row. 2 worker processes x 1 thread, 4 GiB each;
the first N_ROWS rows of STORE, the descriptors-at-scale store the bench writes; seed 0.)
Prints one JSON line: rows, mode, seconds, passes, energy of the seeds on the same rows (one assign pass, untimed).
"""
import json
import sys
import time

from distributed import Client, LocalCluster

from daskmeans import open_input
from daskmeans.algorithms.init import kmeans_parallel, kmeans_parallel_bounded
from daskmeans.passes.assign import assign_stats_graph
from daskmeans.engine.client import compute_now

store, n_rows, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
k = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="4GiB", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        data = open_input(store)
        array = data.array[:n_rows] if n_rows < data.array.shape[0] else data.array
        from daskmeans.engine.slabs import stored_form, with_stored_form
        if n_rows < data.array.shape[0]:
            array = with_stored_form(array, stored_form(data.array)[:n_rows])
        notes = []
        start = time.perf_counter()
        if mode == "full":
            centers, passes = kmeans_parallel(array, k, 0, client=client,
                                              on_progress=lambda d, t, n=None: notes.append((time.perf_counter() - start, d, t, n)))
        else:
            centers, passes = kmeans_parallel_bounded(array, k, 0, client=client,
                                                      on_progress=lambda d, t, n=None: notes.append((time.perf_counter() - start, d, t, n)))
        seconds = time.perf_counter() - start
        (stats,) = compute_now(assign_stats_graph(array, centers), client=client)
        energy = float(stats[2].sum())
        print(json.dumps({"rows": int(array.shape[0]), "k": k, "mode": mode, "seconds": round(seconds, 2),
                          "passes": passes, "seed_energy_per_row": energy / array.shape[0],
                          "progress": [(round(t, 1), d, tt, n) for t, d, tt, n in notes]}))
