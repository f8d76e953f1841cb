"""What every bench kind shares: names checked against a list, the machine and cluster a run used, the warm-up
before anything is timed, and one writer of outputs (a JSON record, a Markdown table, plots).

Every kind (energy over time in :mod:`.report`, sizing in :mod:`.sizing`, clustering quality in
:mod:`.kernel_quality`, the vc-GMM study in :mod:`.coreset_tradeoff`) writes ``NAME.json`` (everything, so that
tables and plots can be rebuilt from it), ``NAME.md`` (its table) and its plots as ``NAME.png`` or
``NAME-PLOT.png``; each file appears complete or not at all.
"""

from __future__ import annotations

import datetime
import gc
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import time

import dask
import dask.array as da
import numpy as np
import psutil
from dask.system import CPU_COUNT

from .._version import __version__
from ..engine.blas import tasks_run_in_this_process
from ..exceptions import InvalidParameterError, OutputExistsError
from ..kernels.assign import nearest_centers
from ..registry import make_estimator
from ..storage.zarr_safe import json_default

#: The plot a kind writes as ``NAME.png``; any other plot name ``P`` is written as ``NAME-P.png``.
MAIN_PLOT = "png"
#: The largest ``k`` the warm-up fits (``algorithm="auto"`` picks the same bounds for any larger one).
WARM_UP_MAX_CLUSTERS = 1024


# -- options -----------------------------------------------------------------------------------------------------------
def split_names(values, known, what):
    """The names in ``values`` checked against ``known``: None when none were given, ``()`` for ``none``.

    Raises
    ------
    InvalidParameterError
        A name is not in ``known``.
    """
    if values is None:
        return None
    names = tuple(v for v in values if v)
    if names in ((), ("none",)):
        return ()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InvalidParameterError(
            f"Unknown {what} {', '.join(map(repr, unknown))}; choose from {', '.join(known)} (or 'none')."
        )
    return names


def check_seeds(seeds):
    """Raise :class:`InvalidParameterError` unless ``seeds`` is a positive integer."""
    if not isinstance(seeds, int) or seeds < 1:
        raise InvalidParameterError(f"--seeds must be a positive integer, got {seeds!r}.")


def check_out_dir(out_dir):
    """Raise :class:`InvalidParameterError` where ``--out`` names a file."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InvalidParameterError(f"--out {out_dir!r} is a file; give a folder.")


def refuse_existing(paths):
    """Raise :class:`OutputExistsError` naming the first of ``paths`` that exists (an earlier run's output)."""
    existing = [path for path in paths if os.path.exists(path)]
    if existing:
        raise OutputExistsError(
            f"{existing[0]!r} exists already (results of an earlier run); choose another --out or pass --overwrite."
        )


# -- machine and cluster -----------------------------------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module):
    try:
        return str(__import__(module).__version__)
    except Exception:  # noqa: BLE001 - absent or broken modules are reported as such
        return None


def _distribution_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict:
    """The machine the benchmark ran on."""
    memory = psutil.virtual_memory()
    return {
        "host": socket.gethostname(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_bytes": int(memory.total),
        "available_memory_bytes": int(memory.available),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {
            name: _version(name)
            for name in (
                "numpy",
                "dask",
                "distributed",
                "zarr",
                "numba",
                "sklearn",
                "faiss",
                "dask_ml",
                "threadpoolctl",
            )
        }
        | {"daskmeans": __version__, "scikit-learn-intelex": _distribution_version("scikit-learn-intelex")},
    }


def code_commit() -> dict:
    """The git commit of the daskmeans code that runs, for a record's header.

    Returns
    -------
    dict
        ``{"commit": short hash or None, "uncommitted_changes": bool or None}``; None for both outside a git
        checkout (an installed package).
    """
    folder = os.path.dirname(os.path.abspath(__file__))

    def git(*args):
        try:
            done = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    if commit is None:
        return {"commit": None, "uncommitted_changes": None}
    changes = git("status", "--porcelain", "--untracked-files=no", "--", os.path.dirname(folder))
    return {"commit": commit, "uncommitted_changes": bool(changes)}


def machine_text(machine) -> str:
    """A record's machine in words: ``AMD EPYC, 2 CPUs, 23.5 GiB``."""
    return f"{machine['cpu']}, {machine['cpus']} CPUs, {machine['memory_bytes'] / 2**30:.1f} GiB"


def provenance_lines(record) -> list:
    """The lines that say where a record comes from: the code's commit, the date, and the command that makes it
    again (writing where the record lives)."""
    commit = record.get("commit")
    if commit:
        code = f"Made at the code of `{commit}`" + (
            " with uncommitted changes" if record.get("uncommitted_changes") else ""
        )
    else:
        code = "Made at a code version without a git commit"
    when = record["created"].replace("T", " ").replace("+00:00", " UTC")
    lines = [f"{code}, on {when}."]
    if record.get("command"):
        lines.append(f"Regenerate with: `{record['command']}`.")
    return lines


def load_average():
    """The 1-minute load average (how busy the machine was; None where the OS does not say)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def cluster_info(client) -> dict:
    """The workers of ``client``'s cluster: how many, their threads and memory limits, and whether their tasks run
    in this process (threaded workers). Without a client: Dask's threaded scheduler, no workers
    (``"scheduler": "threads"``, ``threads`` its pool's size)."""
    if client is None:
        threads = dask.config.get("num_workers", None) or CPU_COUNT
        return {
            "in_process": True,
            "scheduler": "threads",
            "n_workers": 0,
            "threads": int(threads),
            "threads_per_worker": [],
            "memory_limit_per_worker": [],
        }
    info = client.scheduler_info()
    workers = info.get("workers", {})
    return {
        "in_process": tasks_run_in_this_process(client),
        "scheduler": info.get("address"),
        "n_workers": len(workers),
        "threads": sum(w.get("nthreads", 0) for w in workers.values()),
        "threads_per_worker": sorted({w.get("nthreads", 0) for w in workers.values()}),
        "memory_limit_per_worker": sorted({int(w.get("memory_limit") or 0) for w in workers.values()}),
    }


def warm_up(client, algorithms, n_features, dtype=np.float32, n_clusters=32):
    """Compile the Numba kernels in the driver and on every worker before anything is timed.

    ``algorithm="auto"`` picks its bounds from ``k`` and the row's bytes, so the warm-up fits rows of the
    workload's ``dtype`` (the same conversion paths) with ``k`` = 32 and the workload's ``n_clusters`` (at most
    :data:`WARM_UP_MAX_CLUSTERS`), and ``k = d = 2``: the number of yinyang groups, and with it the revisit's path
    (:func:`daskmeans.kernels.revisit.scores_by_groups`), depends on ``k``, and a path the warm-up did not take is
    left to the first timed run to load.
    """
    rng = np.random.default_rng(0)
    dtype = np.dtype(dtype)
    own_k = max(2, min(int(n_clusters), WARM_UP_MAX_CLUSTERS))
    n_rows = max(3000, 4 * own_k)
    if np.issubdtype(dtype, np.integer):
        X = rng.integers(0, min(256, np.iinfo(dtype).max), size=(n_rows, max(16, n_features))).astype(dtype)
    else:
        X = rng.standard_normal((n_rows, max(16, n_features))).astype(dtype)
    for k, d in sorted({(2, 2), (32, X.shape[1]), (own_k, X.shape[1])}):
        nearest_centers(X[:100, :d].astype(np.float32), X[:k, :d].astype(np.float32))
        for name in algorithms:
            try:
                estimator = make_estimator(
                    name,
                    n_clusters=k,
                    init=X[:k, :d].astype(np.float32),
                    max_time=0.2,
                    random_state=0,
                    client=client,
                    progress=False,
                )
                estimator.fit(da.from_array(np.ascontiguousarray(X[:, :d]), chunks=(n_rows // 4, d)))
            except Exception:  # noqa: BLE001 - a failing algorithm is recorded by its real run
                pass


#: The longest :func:`settle` waits for the workers to finish what they run.
SETTLE_TIMEOUT = 120.0


def _tasks_executing(dask_worker) -> int:
    return dask_worker.state.executing_count


def settle(client):
    """Collect garbage and wait until no worker runs a task, before a timed run.

    A fit that returns on ``max_time`` cancels the passes it submitted ahead, but a task already running on a
    worker runs to its end: the next timed run (a fit, or a peer sharing the machine's cores) must not pay for it.
    Without a client (Dask's threaded scheduler) only the garbage is collected.
    """
    gc.collect()
    if client is None:
        return
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while any(client.run(_tasks_executing).values()) and time.monotonic() < deadline:
        time.sleep(0.01)


# -- outputs -----------------------------------------------------------------------------------------------------------
def created() -> str:
    """The time a record is made: UTC, ISO 8601, to the second."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def output_paths(out_dir, name, plots=()) -> dict:
    """Where the outputs named ``name`` go in ``out_dir``: ``"json"`` and ``"md"``, then one path per plot name.

    Parameters
    ----------
    out_dir : str
    name : str
        File name without extension (``descriptors``, ``mnist-quality``, ``kdd-vc-gmm``, ...).
    plots : sequence of str
        Plot names: :data:`MAIN_PLOT` is ``NAME.png``, any other ``P`` is ``NAME-P.png``.

    Returns
    -------
    dict
        ``{"json": ..., "md": ..., plot name: ...}``, in that order.
    """
    paths = {ext: os.path.join(out_dir, f"{name}.{ext}") for ext in ("json", "md")}
    for plot in plots:
        paths[plot] = os.path.join(out_dir, f"{name}.png" if plot == MAIN_PLOT else f"{name}-{plot}.png")
    return paths


def write_text(path, text):
    """Write ``text`` to ``path`` through a temporary file, so that ``path`` is complete or absent."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def record_json(record) -> str:
    """A record as the JSON its file holds (NumPy values as plain numbers and lists; NaN refused)."""
    return json.dumps(record, indent=1, default=json_default, allow_nan=False)


def write_report(out_dir, name, record, table, plots=None) -> list:
    """Write ``NAME.json`` (the record), ``NAME.md`` (``table``) and each plot of ``plots``.

    Parameters
    ----------
    out_dir, name : str
        As :func:`output_paths`.
    record : dict
    table : str
        The Markdown text.
    plots : dict, optional
        ``{plot name: draw}`` where ``draw(record, path)`` writes a PNG file at ``path``.

    Returns
    -------
    list of str
        The paths written.
    """
    plots = plots or {}
    paths = output_paths(out_dir, name, plots)
    write_text(paths["json"], record_json(record))
    write_text(paths["md"], table)
    return [paths["json"], paths["md"], *write_plots(record, paths, plots)]


def write_plots(record, paths, plots) -> list:
    """Draw each plot of ``plots`` (``{plot name: draw}``, ``draw(record, path)``) at ``paths[plot name]``
    through a temporary file; return the paths written."""
    for plot, draw in plots.items():
        tmp = paths[plot][: -len(".png")] + ".tmp.png"
        draw(record, tmp)
        os.replace(tmp, paths[plot])
    return [paths[plot] for plot in plots]


def table_lines(columns, rows, right=()) -> list:
    """A Markdown table: the header row, the separator, one line per row of cells.

    Parameters
    ----------
    columns : sequence of str
    rows : iterable of sequences of str
    right : collection of int
        Positions of the right-aligned columns.
    """
    separator = "|" + "".join("---:|" if i in right else "---|" for i in range(len(columns)))
    return ["| " + " | ".join(columns) + " |", separator] + ["| " + " | ".join(cells) + " |" for cells in rows]


def gib(value):
    """Bytes as GiB with two decimals (empty when unknown or zero)."""
    return "" if not value else f"{value / 2**30:.2f} GiB"
