"""The benchmark harness (``daskmeans bench``): workloads, peers, exact energy over time, tables and plots.

Every run of a workload starts from the same initial centers; the harness times only the algorithms and
evaluates the energy of their centers exactly on all rows afterwards. See :mod:`daskmeans.bench.command`
for the command line and :func:`daskmeans.bench.runner.run_benchmark` for the Python entry point.

Each bench kind keeps its own columns: energy over time (:mod:`.report`), sizing (:mod:`.sizing`), quality
against true labels (:mod:`.kernel_quality`), the vc-GMM study (:mod:`.coreset_tradeoff`); what they share
(machine and cluster facts, the warm-up, the writer of the JSON record, Markdown table and plots) is in
:mod:`.common`. The published records are a suite (:mod:`.suite`: one entry per record, ``daskmeans bench
suite``), read back by :mod:`.records` and shown on the benchmarks page (:mod:`.page`). Nothing outside this
package imports it: the CLI loads ``bench`` by name.
"""

from .peers import PEERS
from .runner import BenchOptions, run_benchmark
from .workloads import WORKLOADS, workload_names

__all__ = ["BenchOptions", "run_benchmark", "PEERS", "WORKLOADS", "workload_names"]
