"""Checkpoints: a driver killed with SIGKILL mid-fit resumes to the result of an undisturbed run, for every
algorithm; a crash in the middle of a save leaves the previous checkpoint usable; checkpoints of other fits,
damaged checkpoints and checkpoints carrying a pickle are refused."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster

import daskmeans
from daskmeans import CheckpointError, CheckpointMismatchError, InvalidParameterError, KMeans, VRKMeans, load
from daskmeans.kernels.packed_bounds import unpack_bounds
from daskmeans.storage.checkpoint import MARKER, POINTER

N_SAMPLES, N_FEATURES, CHUNK_ROWS = 10_000, 4, 2_000
#: Many cheap iterations, so that a fit lasts long enough to be killed in the middle.
ALGORITHMS = {
    "kmeans": ("KMeans", {"n_clusters": 16, "init": "random", "tol": 0.0, "max_iter": 12, "n_init": 2}),
    # bounds are not saved: the first iteration after a resume scores every center (same centers, labels, energies)
    "kmeans-bounds": ("KMeans", {"n_clusters": 16, "init": "random", "tol": 0.0, "max_iter": 25, "algorithm": "elkan"}),
    "vrkm": ("VRKMeans", {"n_clusters": 16, "variant": "vrkm", "epoch_size": 200, "max_epochs": 20, "tol": 0.0}),
    "nmbatch": (
        "NestedMiniBatchKMeans",
        {"n_clusters": 16, "initial_batch_size": 500, "rho": 2.0, "max_iter": 30, "tol": 0.0},
    ),
    # each chunk's labels, distances and bounds written where they live; no rows (they are re-read from the data)
    "nmbatch-reread": (
        "NestedMiniBatchKMeans",
        {"n_clusters": 16, "initial_batch_size": 500, "rho": 2.0, "max_iter": 30, "tol": 0.0, "batch_rows": "reread"},
    ),
    "minibatch": (
        "MiniBatchKMeans",
        {"n_clusters": 16, "batch_size": 2**17, "max_iter": 400, "max_no_improvement": None},
    ),
    # the E-step blocks and every point's K_n on the workers: the state fetched from them at each save
    "vc-gmm": (
        "CoresetGaussianMixture",
        {
            "n_components": 16,
            "coreset_size": 4000,
            "n_truncated": 3,
            "search_size": 3,
            "max_iter": 30,
            "tol": 0.0,
            "estep_on": "workers",
        },
    ),
    "kernel-minibatch": (
        "MiniBatchKernelKMeans",
        {"n_clusters": 16, "batch_size": 200, "tau": 400, "max_iter": 40, "init_sample_size": 1000},
    ),
}
COMMON = {"random_state": 5, "chunk_rows": CHUNK_ROWS}
#: Versions a checkpoint has when the driver is killed: for KMeans, in its second run (the first run is 1 + 12 + 1
#: saves: after seeding, after each iteration, after the run).
KILL_AT_VERSION = {"kmeans": 17, "kmeans-bounds": 8}
#: History fields that measure time (or where the work ran) rather than describe the run.
TIMING_FIELDS = {"wall_time", "pass_time", "inner_time", "inner_on", "rows_per_second"}

FIT_SCRIPT = """
import json
import sys

import numpy as np
from distributed import Client

import daskmeans

if __name__ == "__main__":
    address, data, checkpoint, out, name, params = sys.argv[1:7]
    with Client(address, set_as_default=False) as client:
        model = getattr(daskmeans, name)(**json.loads(params), client=client)
        model.fit(data, checkpoint=checkpoint)
        labels = client.compute(model.labels_).result()
        history = json.dumps(model.history_, default=lambda value: value.item())
        np.savez(out, centers=model.cluster_centers_, labels=labels, inertia=model.inertia_, history=history,
                 stop_reason=model.stop_reason_, n_iter=model.n_iter_)
"""


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def client(cluster):
    with Client(cluster, set_as_default=False) as client:
        yield client


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("checkpoints")


def write_uniform(path, seed):
    """Uniform random data (no clusters: Lloyd needs many iterations) as a chunked Zarr array."""
    values = np.random.default_rng(seed).random((N_SAMPLES, N_FEATURES), dtype=np.float32)
    array = zarr.open_array(str(path), mode="w", shape=values.shape, chunks=(CHUNK_ROWS, N_FEATURES), dtype="float32")
    array[...] = values
    return str(path)


@pytest.fixture(scope="module")
def data(workdir):
    return write_uniform(workdir / "uniform.zarr", seed=0)


def environment():
    return {key: value for key, value in os.environ.items() if key != "DASK_SCHEDULER_ADDRESS"}


def current_version(checkpoint):
    """The version ``CURRENT`` names, or None before the first save."""
    try:
        with open(os.path.join(checkpoint, POINTER)) as handle:
            return json.load(handle)["version"]
    except FileNotFoundError:
        return None


def saved_state(checkpoint):
    """The JSON part of the current version's state, read directly from the files."""
    with open(os.path.join(checkpoint, POINTER)) as handle:
        directory = json.load(handle)["directory"]
    return json.loads(zarr.open_group(os.path.join(checkpoint, directory), mode="r").attrs["state"])


def kill_mid_fit(command, checkpoint, min_version=3, timeout=180):
    """Start ``command``, SIGKILL it once the checkpoint has ``min_version`` versions; fail if it ends first."""
    process = subprocess.Popen(command, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while (current_version(checkpoint) or 0) < min_version:
        if process.poll() is not None:
            pytest.fail(f"the fit ended before it could be killed (rc {process.returncode}): {process.stderr.read()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("no checkpoint appeared in time")
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL


#: Fields that count work a resumed run does differently (exact k-means rereads the rows and rebuilds its bounds).
WORK_FIELDS = {"distances_computed", "distances_skipped", "passes"}


def without_timing(history, ignore=TIMING_FIELDS):
    return [{key: value for key, value in record.items() if key not in ignore} for record in history]


def reference_fit(name, client, data, **extra):
    cls_name, params = ALGORITHMS[name]
    return getattr(daskmeans, cls_name)(**params, **COMMON, **extra, client=client).fit(data)


_KILLED: dict = {}


def killed_checkpoint(name, cluster, data, workdir):
    """A checkpoint left by a fit of ``name`` killed mid-way (made once per module; tests use copies)."""
    if name not in _KILLED:
        cls_name, params = ALGORITHMS[name]
        script = workdir / "fit_script.py"
        script.write_text(FIT_SCRIPT)
        checkpoint = str(workdir / f"{name}-killed.ckpt")
        args = [
            cluster.scheduler_address,
            data,
            checkpoint,
            str(workdir / f"{name}-unused.npz"),
            cls_name,
            json.dumps({**params, **COMMON}),
        ]
        kill_mid_fit([sys.executable, str(script), *args], checkpoint, min_version=KILL_AT_VERSION.get(name, 3))
        state = saved_state(checkpoint)
        inner = state["run_state"] if cls_name == "KMeans" else state["algorithm"]
        assert inner is not None and inner["stop_reason"] is None, "the fit was killed after it ended"
        histories = [inner["history"]]
        shared = sorted(entry for entry in os.listdir(checkpoint) if entry.startswith("shared-"))
        if cls_name == "NestedMiniBatchKMeans" and params.get("batch_rows") != "reread":
            assert shared == [f"shared-{inner['layout_id']}"]  # the batch's rows, written when it last grew or split
        else:
            assert shared == []
        if name == "kmeans":
            assert state["run"] == 1, "the fit was not killed in its second run"
            histories.append(state["best"]["history"])
        _KILLED[name] = (checkpoint, args, histories)
    return _KILLED[name]


def copy_of(name, cluster, data, workdir, tmp_path):
    checkpoint, _, _ = killed_checkpoint(name, cluster, data, workdir)
    copy = str(tmp_path / "copy.ckpt")
    shutil.copytree(checkpoint, copy)
    return copy


def assert_same_fit(model, reference, ignore=TIMING_FIELDS):
    np.testing.assert_array_equal(model.cluster_centers_, reference.cluster_centers_)
    assert model.inertia_ == reference.inertia_
    assert model.n_iter_ == reference.n_iter_ and model.stop_reason_ == reference.stop_reason_
    assert without_timing(model.history_, ignore) == without_timing(reference.history_, ignore)


# -- a driver killed with SIGKILL ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_killed_fit_resumes_to_the_undisturbed_result(name, cluster, client, data, workdir, tmp_path):
    _, args, histories_at_kill = killed_checkpoint(name, cluster, data, workdir)
    checkpoint = copy_of(name, cluster, data, workdir, tmp_path)
    resumed = tmp_path / "resumed.npz"
    args = [*args[:2], checkpoint, str(resumed), *args[4:]]
    done = subprocess.run(
        [sys.executable, str(workdir / "fit_script.py"), *args],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    reference = reference_fit(name, client, data)
    with np.load(resumed) as result:
        np.testing.assert_array_equal(result["centers"], reference.cluster_centers_)
        np.testing.assert_array_equal(result["labels"], client.compute(reference.labels_).result())
        assert float(result["inertia"]) == reference.inertia_
        assert str(result["stop_reason"]) == reference.stop_reason_ and int(result["n_iter"]) == reference.n_iter_
        history = json.loads(str(result["history"]))
    ignore = TIMING_FIELDS | (WORK_FIELDS if name == "kmeans-bounds" else set())
    assert without_timing(history, ignore) == without_timing(
        json.loads(json.dumps(reference.history_, default=float)), ignore
    )
    # the iterations done before the kill were not redone: their records (wall times included) come from it (for
    # KMeans: the result is either the first run, kept whole, or the second, continued)
    assert all(len(saved) >= 1 for saved in histories_at_kill)
    assert any(history[: len(saved)] == saved for saved in histories_at_kill)
    # one version is left, with no rows of a batch
    assert len([entry for entry in os.listdir(checkpoint) if entry.startswith(("v", "shared-"))]) == 1
    # the finished checkpoint gives the result again without iterating
    again = getattr(daskmeans, ALGORITHMS[name][0])(**ALGORITHMS[name][1], **COMMON, client=client)
    assert_same_fit(again.fit(data, checkpoint=checkpoint), reference, ignore)
    assert again.history_ == history


@pytest.mark.slow
def test_the_command_line_resumes_a_killed_fit(cluster, client, data, tmp_path):
    checkpoint = str(tmp_path / "cli.ckpt")
    model_path, labels_path = str(tmp_path / "model.zarr"), str(tmp_path / "labels.zarr")
    command = [
        sys.executable,
        "-m",
        "daskmeans",
        "fit",
        data,
        "-k",
        "16",
        "--init",
        "random",
        "--max-iter",
        "60",
        "--scheduler",
        cluster.scheduler_address,
        "--checkpoint",
        checkpoint,
        "--out",
        model_path,
        "--labels",
        labels_path,
        "--quiet",
        "--json",
    ]
    kill_mid_fit(command, checkpoint)
    assert not os.path.exists(model_path) and not os.path.exists(labels_path)
    state = saved_state(checkpoint)
    assert state["run_state"]["stop_reason"] is None
    done = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["checkpoint"] == checkpoint
    # no --seed: the seed drawn by the first run was kept in the checkpoint and used by the resumed one
    reference = KMeans(16, init="random", max_iter=60, random_state=state["seed"], client=client).fit(data)
    model = load(model_path)
    np.testing.assert_array_equal(model.cluster_centers_, reference.cluster_centers_)
    assert without_timing(model.history_) == without_timing(json.loads(json.dumps(reference.history_)))
    np.testing.assert_array_equal(
        zarr.open_array(labels_path, mode="r")[...], client.compute(reference.labels_).result()
    )


# -- a crash in the middle of a save ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_half_written_version_leaves_the_previous_checkpoint_usable(cluster, client, data, workdir, tmp_path):
    checkpoint = copy_of("kmeans", cluster, data, workdir, tmp_path)
    version = current_version(checkpoint)
    with open(os.path.join(checkpoint, POINTER)) as handle:
        current = json.load(handle)["directory"]
    # what a driver dying during the next save leaves: a partial version directory and a partial pointer file
    half = os.path.join(checkpoint, f"v{version + 1:08d}-0badc0de")
    shutil.copytree(os.path.join(checkpoint, current), half)
    shutil.rmtree(os.path.join(half, "arrays"))
    with open(os.path.join(half, "zarr.json"), "w") as handle:
        handle.write('{"zarr_format": 3, "node_type": "gro')
    with open(os.path.join(checkpoint, f"{POINTER}.tmp-0badc0de"), "w") as handle:
        handle.write('{"format": "daskmeans-checkpoint", "vers')
    assert current_version(checkpoint) == version

    model = KMeans(**ALGORITHMS["kmeans"][1], **COMMON, client=client).fit(data, checkpoint=checkpoint)
    assert_same_fit(model, reference_fit("kmeans", client, data))
    leftovers = sorted(os.listdir(checkpoint))
    assert len([name for name in leftovers if name.startswith("v")]) == 1
    assert os.path.basename(half) not in leftovers and f"{POINTER}.tmp-0badc0de" not in leftovers


@pytest.mark.slow
def test_a_resumed_kmeans_with_several_runs_matches(cluster, client, data, tmp_path):
    """n_init > 1: the best run so far and the run index are part of the state."""
    params = {**ALGORITHMS["kmeans"][1], "max_iter": 8, "n_init": 3}
    checkpoint = str(tmp_path / "runs.ckpt")
    first = KMeans(**params, **COMMON, client=client).fit(data, checkpoint=checkpoint)
    reference = KMeans(**params, **COMMON, client=client).fit(data)
    assert_same_fit(first, reference)
    state = saved_state(checkpoint)
    assert state["run"] == 3 and state["run_state"] is None and state["best"] is not None


# -- refused checkpoints -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_checkpoint_of_another_fit_is_refused(cluster, client, data, workdir, tmp_path):
    checkpoint = copy_of("kmeans", cluster, data, workdir, tmp_path)
    params = dict(ALGORITHMS["kmeans"][1], **COMMON, client=client)
    before = sorted(os.listdir(checkpoint))
    with pytest.raises(
        CheckpointMismatchError,
        match="parameter n_clusters: 16 in the checkpoint, 15 now.*use another checkpoint path.*delete",
    ):
        KMeans(**{**params, "n_clusters": 15}).fit(data, checkpoint=checkpoint)
    with pytest.raises(CheckpointMismatchError, match="estimator: 'KMeans' in the checkpoint, 'VRKMeans' now"):
        VRKMeans(16, random_state=5, chunk_rows=CHUNK_ROWS, client=client).fit(data, checkpoint=checkpoint)
    with pytest.raises(CheckpointMismatchError, match="row_chunks"):
        KMeans(**{**params, "chunk_rows": 2500}).fit(data, checkpoint=checkpoint)
    with pytest.raises(CheckpointMismatchError, match="shape"):
        KMeans(**params).fit(np.zeros((N_SAMPLES + 1, N_FEATURES), dtype=np.float32), checkpoint=checkpoint)
    other = write_uniform(tmp_path / "other.zarr", seed=1)  # same shape, dtype and chunks; other values
    with pytest.raises(CheckpointMismatchError, match="other data.*delete"):
        KMeans(**params).fit(other, checkpoint=checkpoint)
    assert sorted(os.listdir(checkpoint)) == before  # refused checkpoints are left as they were


def test_paths_that_are_not_checkpoints_are_refused(tmp_path, data):
    X = np.random.default_rng(0).random((50, 2))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not a daskmeans checkpoint.*another path"):
        KMeans(2).fit(X, checkpoint=busy)
    with pytest.raises(CheckpointError, match="is a file"):
        KMeans(2).fit(X, checkpoint=busy / "notes.txt")
    with pytest.raises(InvalidParameterError, match="path or URL"):
        KMeans(2).fit(X, checkpoint=3)

    class Plain(KMeans):
        _supports_checkpoint = False

    with pytest.raises(InvalidParameterError, match="does not support checkpoint"):
        Plain(2).fit(X, checkpoint=tmp_path / "plain.ckpt")
    assert not (tmp_path / "plain.ckpt").exists()
    KMeans(2, random_state=0).fit(X, checkpoint=tmp_path / "empty")  # a missing or empty directory is fine
    assert (tmp_path / "empty" / MARKER).exists()


def _version_directory(checkpoint):
    with open(os.path.join(checkpoint, POINTER)) as handle:
        return os.path.join(checkpoint, json.load(handle)["directory"])


def _garbage_pointer(checkpoint):
    with open(os.path.join(checkpoint, POINTER), "w") as handle:
        handle.write("{not json")


def _pointer_to_nothing(checkpoint):
    shutil.rmtree(_version_directory(checkpoint))


def _state_not_json(checkpoint):
    group = zarr.open_group(_version_directory(checkpoint), mode="r+")
    group.attrs["state"] = "{truncated"


def _state_without_centers(checkpoint):
    group = zarr.open_group(_version_directory(checkpoint), mode="r+")
    state = json.loads(group.attrs["state"])
    del state["run_state"]["centers"]
    group.attrs["state"] = json.dumps(state)


def _truncated_chunk(checkpoint):
    array_dir = os.path.join(_version_directory(checkpoint), "arrays", "a0")
    with open(os.path.join(array_dir, "0.0"), "r+b") as handle:
        handle.truncate(3)


def _missing_array(checkpoint):
    shutil.rmtree(os.path.join(_version_directory(checkpoint), "arrays", "a0"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage, message",
    [
        (_garbage_pointer, "CURRENT is not readable JSON"),
        (_pointer_to_nothing, "which is missing"),
        (_state_not_json, "state is not JSON"),
        (_state_without_centers, "state has no 'centers'"),
        (_truncated_chunk, "cannot read array 'a0'"),
        (_missing_array, "cannot be opened|missing"),
    ],
)
def test_a_damaged_checkpoint_is_refused(damage, message, cluster, client, data, workdir, tmp_path):
    checkpoint = copy_of("kmeans", cluster, data, workdir, tmp_path)
    damage(checkpoint)
    with pytest.raises(CheckpointError, match=message):
        KMeans(**ALGORITHMS["kmeans"][1], **COMMON, client=client).fit(data, checkpoint=checkpoint)


@pytest.mark.slow
@pytest.mark.parametrize("part", ["labels", "rows"])
def test_a_damaged_state_block_is_refused_by_the_worker(part, cluster, client, data, workdir, tmp_path):
    checkpoint = copy_of("nmbatch", cluster, data, workdir, tmp_path)
    if part == "labels":
        labels = os.path.join(_version_directory(checkpoint), "extra", "blocks", "00000", "labels")
        chunks = [name for name in os.listdir(labels) if name != "zarr.json"]
        assert chunks
        for name in chunks:  # chunks that no longer decode
            with open(os.path.join(labels, name), "r+b") as handle:
                handle.truncate(1)
        message = "state block.*damaged"
    else:
        (shared,) = [entry for entry in os.listdir(checkpoint) if entry.startswith("shared-")]
        shutil.rmtree(os.path.join(checkpoint, shared, "00000", "rows"))
        message = "rows.*(damaged|cannot be opened)"
    with pytest.raises(CheckpointError, match=message):
        daskmeans.NestedMiniBatchKMeans(**ALGORITHMS["nmbatch"][1], **COMMON, client=client).fit(
            data, checkpoint=checkpoint
        )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["nmbatch", "nmbatch-reread"])
def test_a_checkpoint_with_float32_bounds_resumes_to_the_undisturbed_result(
    name, cluster, client, data, workdir, tmp_path
):
    """Checkpoints written before the bounds were kept in 16 bits hold them as float32: they are rounded down into
    16 bits when read (here float32 copies of the stored bounds, which round back to the same codes)."""
    checkpoint = copy_of(name, cluster, data, workdir, tmp_path)
    rewritten = 0
    for directory, _, files in os.walk(_version_directory(checkpoint)):
        if os.path.basename(directory) == "lower" and "zarr.json" in files:
            group = zarr.open_group(os.path.dirname(directory), mode="r+")
            codes = group["lower"][...]
            assert codes.dtype == np.uint16
            widened = unpack_bounds(codes).astype(np.float32)
            del group["lower"]
            group.create_array(
                "lower", shape=widened.shape, dtype=np.float32, chunks=tuple(max(1, n) for n in widened.shape)
            )
            if widened.size:
                group["lower"][...] = widened
            rewritten += 1
    assert rewritten > 0
    resumed = getattr(daskmeans, ALGORITHMS[name][0])(**ALGORITHMS[name][1], **COMMON, client=client)
    assert_same_fit(resumed.fit(data, checkpoint=checkpoint), reference_fit(name, client, data))


class Payload:
    """Unpickling this creates the marker file: proof that something was unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["|O", "<f8"])
def test_a_checkpoint_carrying_a_pickle_is_never_unpickled(dtype, cluster, client, data, workdir, tmp_path):
    checkpoint = copy_of("kmeans", cluster, data, workdir, tmp_path)
    arrays = os.path.join(_version_directory(checkpoint), "arrays")
    shutil.rmtree(arrays)
    os.makedirs(os.path.join(arrays, "a0"))
    marker = tmp_path / "pwned"
    with open(os.path.join(arrays, ".zgroup"), "w") as handle:
        json.dump({"zarr_format": 2}, handle)
    with open(os.path.join(arrays, "a0", ".zarray"), "w") as handle:
        json.dump(
            {
                "zarr_format": 2,
                "shape": [1],
                "chunks": [1],
                "dtype": dtype,
                "compressor": None,
                "fill_value": 0,
                "order": "C",
                "filters": [{"id": "pickle", "protocol": 5}],
            },
            handle,
        )
    with open(os.path.join(arrays, "a0", "0"), "wb") as handle:
        handle.write(pickle.dumps(np.array([Payload(marker)], dtype=object)))
    with pytest.raises(CheckpointError, match="not read|damaged"):
        KMeans(**ALGORITHMS["kmeans"][1], **COMMON, client=client).fit(data, checkpoint=checkpoint)
    assert not marker.exists()


@pytest.mark.slow
def test_the_command_line_refuses_a_foreign_checkpoint_before_starting_a_cluster(cluster, data, workdir, tmp_path):
    from click.testing import CliRunner

    from daskmeans import cli

    checkpoint = copy_of("kmeans", cluster, data, workdir, tmp_path)
    runner = CliRunner()
    result = runner.invoke(cli.main, ["fit", data, "-k", "12", "--checkpoint", checkpoint, "--quiet"])
    assert result.exit_code == 1
    assert "parameter n_clusters: 16 in the checkpoint, 12 now" in result.output
    assert "use another checkpoint path" in result.output and "Traceback" not in result.output
    model = str(tmp_path / "model.zarr")
    result = runner.invoke(cli.main, ["fit", data, "-k", "16", "--checkpoint", model, "--out", model, "--quiet"])
    assert result.exit_code == 1 and "is --out" in result.output and "a directory of its own" in result.output
