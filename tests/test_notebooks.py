"""The notebooks: committed clean (kernel metadata, a `parameters` cell, no outputs) and executed end to end.

Execution needs nbclient, nbformat and ipykernel (skipped with the reason when they are missing); each notebook
runs in a fresh kernel in a temporary folder, on its own local cluster, at its shipped defaults (the out-of-core
notebook also with small injected parameters, for a quick check of its cells).
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

import pytest

from daskmeans.registry import algorithm_names

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: Variables that would send a notebook to an outside cluster instead of its own local one.
CLUSTER_VARIABLES = ("DASK_SCHEDULER_ADDRESS", "DASK_GATEWAY__ADDRESS")


def read(path: Path):
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install nbformat)")
    return nbformat.read(path, as_version=4)


def parameters_cell(notebook):
    cells = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", [])]
    assert len(cells) == 1, "expected exactly one cell tagged 'parameters'"
    return cells[0]


def parameters(notebook) -> dict:
    """The literal values assigned in the parameters cell."""
    values = {}
    for node in ast.parse(parameters_cell(notebook).source).body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1, ast.unparse(node)
        values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def execute_notebook(
    path: Path, cwd: Path, *, env: dict | None = None, parameters: dict | None = None, timeout: int = 240
):
    """Run a notebook in a fresh kernel in ``cwd``; return it with its outputs.

    Parameters
    ----------
    env : dict, optional
        Environment variables for the kernel (added to this process's; a value of None removes one).
    parameters : dict, optional
        Values assigned in a cell inserted after the ``parameters`` cell (as papermill does).
    """
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install nbformat)")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (pip install nbclient ipykernel)")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed (pip install ipykernel)")
    notebook = nbformat.read(path, as_version=4)
    if parameters:
        source = "\n".join(f"{name} = {value!r}" for name, value in parameters.items())
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
        notebook.cells.insert(notebook.cells.index(parameters_cell(notebook)) + 1, cell)
    kernel_env = dict(os.environ)
    kernel_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    kernel_env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    for name, value in (env or {}).items():
        if value is None:
            kernel_env.pop(name, None)
        else:
            kernel_env[name] = value
    client = nbclient.NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    client.execute(env=kernel_env)  # keyword arguments go to the kernel's start: its environment
    return notebook


def text_output(notebook) -> str:
    return "\n".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "stream"
    )


def images(notebook) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


def test_the_notebooks_are_there():
    assert [path.name for path in NOTEBOOKS] == [
        "01-quickstart.ipynb",
        "02-out-of-core-on-a-cluster.ipynb",
        "03-coreset-gmm.ipynb",
        "04-kernel-kmeans.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_clean(path):
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install nbformat)")
    notebook = read(path)
    nbformat.validate(notebook)
    assert notebook.metadata.kernelspec.name == "python3"
    assert notebook.metadata.kernelspec.language == "python"
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code[0] is parameters_cell(notebook), "the parameters cell comes first, before any import"
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, "outputs must be stripped"
        assert set(cell.metadata) <= {"tags"}, f"stray cell metadata {dict(cell.metadata)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_defaults_are_small_and_name_registered_algorithms(path):
    values = parameters(read(path))
    if path.name != "02-out-of-core-on-a-cluster.ipynb":  # out of core by default; its test injects small data
        assert values["N_SAMPLES"] * values["N_FEATURES"] <= 10_000_000, "defaults must run in CI in seconds"
    assert values["N_WORKERS"] <= 2
    names = [values["ALGORITHM"]] if "ALGORITHM" in values else [name for name, _ in values["RUNS"].values()]
    assert names and set(names) <= set(algorithm_names())


def test_quickstart_runs(tmp_path):
    notebook = execute_notebook(
        ROOT / "notebooks" / "01-quickstart.ipynb", tmp_path, env={name: None for name in CLUSTER_VARIABLES}
    )
    output = text_output(notebook)
    assert "purity against the true blobs" in output
    assert "dashboard: http://" in output
    assert images(notebook) == 1
    work = tmp_path / "daskmeans-quickstart"
    assert (work / "blobs.zarr" / "labels").is_dir() and (work / "model.zarr").is_dir()


def test_out_of_core_runs_on_a_local_cluster_when_none_is_configured(tmp_path):
    notebook = execute_notebook(
        ROOT / "notebooks" / "02-out-of-core-on-a-cluster.ipynb",
        tmp_path,
        env={name: None for name in CLUSTER_VARIABLES},
        parameters={"MAX_TIME": 5.0, "N_SAMPLES": 200_000, "N_FEATURES": 32, "WORKER_MEMORY": "1GiB"},
    )
    output = text_output(notebook)
    assert "connected to a local cluster: 2 workers" in output
    assert "the memory of one worker" in output and "best: " in output
    assert re.search(r"and ([0-9.]+)x the memory of all workers", output)
    for run in ("kmeans, k-means|| seeding", "kmeans, random seeding", "nested mini-batch (nmbatch)", "VRKM++"):
        assert f"{run}: " in output
    assert (
        "when this daskmeans has them"
        not in read(ROOT / "notebooks" / "02-out-of-core-on-a-cluster.ipynb").cells[1].source
    )
    assert images(notebook) == 1
    assert (tmp_path / "daskmeans-out-of-core" / "labels.zarr").is_dir()


@pytest.mark.timeout(2400)
def test_out_of_core_runs_at_its_shipped_defaults(tmp_path):
    """The notebook as a user's first try runs it: data larger than the two workers' memory together, every run
    (VRKM++ at its default epoch of half the rows included) within its budget, no worker lost."""
    notebook = execute_notebook(
        ROOT / "notebooks" / "02-out-of-core-on-a-cluster.ipynb",
        tmp_path,
        env={name: None for name in CLUSTER_VARIABLES},
        timeout=1200,
    )
    output = text_output(notebook)
    assert "connected to a local cluster: 2 workers" in output
    assert re.search(r"warmed \d+ kernels in .*; 2 workers warmed", output), "the kernels were not warmed first"
    assert float(re.search(r"and ([0-9.]+)x the memory of all workers", output).group(1)) > 1.0
    for run in parameters(read(ROOT / "notebooks" / "02-out-of-core-on-a-cluster.ipynb"))["RUNS"]:
        assert f"{run}: " in output
    assert "no iteration within" not in output, "a run's seeding took its whole budget at the shipped defaults"
    assert "best: " in output and images(notebook) == 1
    assert (tmp_path / "daskmeans-out-of-core" / "labels.zarr").is_dir()


def test_out_of_core_defaults_do_not_fit_in_the_workers_memory():
    from dask.utils import parse_bytes

    values = parameters(read(ROOT / "notebooks" / "02-out-of-core-on-a-cluster.ipynb"))
    data_bytes = values["N_SAMPLES"] * values["N_FEATURES"] * 4  # float32 blobs
    assert values["DATA_URL"] is None
    assert data_bytes > values["N_WORKERS"] * parse_bytes(values["WORKER_MEMORY"])


def test_coreset_gmm_runs(tmp_path):
    notebook = execute_notebook(
        ROOT / "notebooks" / "03-coreset-gmm.ipynb", tmp_path, env={name: None for name in CLUSTER_VARIABLES}
    )
    output = text_output(notebook)
    assert "local cluster: 2 workers" in output
    assert "sum of weights" in output and "distances per coreset point and iteration" in output
    assert "saved and loaded: CoresetGaussianMixture" in output
    assert images(notebook) == 1
    assert (tmp_path / "daskmeans-coreset-gmm" / "model.zarr").is_dir()


def test_kernel_kmeans_separates_the_circles(tmp_path):
    pytest.importorskip("sklearn", reason="the notebook scores with scikit-learn's ARI")
    notebook = execute_notebook(
        ROOT / "notebooks" / "04-kernel-kmeans.ipynb", tmp_path, env={name: None for name in CLUSTER_VARIABLES}
    )
    output = text_output(notebook)
    scores = {
        line.split(" ARI ")[0].strip(): float(line.split(" ARI ")[1].split()[0])
        for line in output.splitlines()
        if " ARI " in line and "iterations" in line
    }
    assert scores["linear k-means"] < 0.1
    assert scores["mini-batch kernel k-means"] > 0.95 and scores["full-batch kernel k-means"] > 0.95
    assert "the loaded model labels all 4,000 rows as the fitted one" in output
    assert images(notebook) == 1
    assert (tmp_path / "daskmeans-kernel" / "kernel-model.zarr").is_dir()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
