"""Writes by Dask tasks: an error is raised only once every write still running has ended."""

import pathlib
import time

import dask
import pytest

from daskmeans.engine.writes import compute_writes


def _fail_now(folder):
    raise OSError(28, "No space left on device")


def _write_late(folder, seconds):
    time.sleep(seconds)
    (pathlib.Path(folder) / "late").write_text("written after the first error")
    return "late"


@pytest.mark.parametrize("where", ["threads", "cluster"])
def test_a_failed_write_returns_after_every_write_has_ended(tmp_path, where, request):
    """The first error is raised only once the writes still running have ended: a folder removed then stays gone."""
    client = request.getfixturevalue("cluster_client") if where == "cluster" else None
    writes = [
        dask.delayed(_write_late, pure=False)(str(tmp_path), 1.5),
        dask.delayed(_fail_now, pure=False)(str(tmp_path)),
    ]
    with pytest.raises(OSError, match="No space left"):
        compute_writes(writes, client)
    assert (tmp_path / "late").read_text() == "written after the first error"


def _write_after(folder, name, seconds):
    time.sleep(seconds)
    (pathlib.Path(folder) / name).write_text("written")
    return name


#: Writes queued behind the failing one: on 2 workers x 1 thread they would take 24 s in all, far more than the
#: error takes to arrive and the executing writes to end.
N_QUEUED_WRITES = 96


@pytest.mark.slow
def test_on_a_cluster_the_writes_not_started_are_cancelled(tmp_path, cluster_client):
    """The error waits for the writes executing, not for those queued behind them (2 workers x 1 thread)."""
    writes = [dask.delayed(_fail_now, pure=False)(str(tmp_path))]
    late_write = dask.delayed(_write_after, pure=False)
    writes += [late_write(str(tmp_path), f"late-{i}", 0.5) for i in range(N_QUEUED_WRITES)]
    with pytest.raises(OSError, match="No space left"):
        compute_writes(writes, cluster_client)
    written = sorted(path.name for path in tmp_path.iterdir())
    time.sleep(1.5)  # longer than one write: a write left running or started after the error would show
    assert sorted(path.name for path in tmp_path.iterdir()) == written  # nothing written after the error
    assert len(written) < N_QUEUED_WRITES, written  # the queued writes were cancelled, not awaited
