"""daskmeans works from a read-only install with a read-only home: a copy of the package made read-only, run in a
real subprocess (its kernels compiled and cached, a process-based Dask cluster fitted) with ``NUMBA_CACHE_DIR``
unset. As root, which ignores permission bits, the subprocess runs without the capabilities that override them
(CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER dropped from its bounding set), so the folders really are
read-only for it; where that cannot be done the tests are skipped with the reason."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import permission_bits_apply

import daskmeans

pytestmark = pytest.mark.slow

PACKAGE = Path(daskmeans.__file__).resolve().parent
KERNEL_CALL = (
    "import os, numpy as np, daskmeans\n"
    "from daskmeans.kernels.distance import exact_dist2\n"
    "X = np.arange(6.0).reshape(3, 2)\n"
    "assert np.allclose(exact_dist2(X, X[:1], np.zeros(3, np.int64)), [0, 8, 32])\n"
    "print(os.environ.get('NUMBA_CACHE_DIR', ''))\n"
)


def make_read_only(path: Path):
    for folder, dirs, files in os.walk(path):
        for name in files + dirs:
            target = os.path.join(folder, name)
            os.chmod(target, os.stat(target).st_mode & ~0o222)
    os.chmod(path, os.stat(path).st_mode & ~0o222)


def make_writable(path: Path):
    os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR)
    for folder, dirs, files in os.walk(path):
        for name in files + dirs:
            target = os.path.join(folder, name)
            os.chmod(target, os.stat(target).st_mode | stat.S_IWUSR)


@pytest.fixture
def read_only_install(tmp_path):
    """``(run, paths)``: ``run(code, **env)`` runs Python on a read-only copy of daskmeans, with a read-only HOME,
    NUMBA_CACHE_DIR and XDG_CACHE_HOME unset (unless given) and TMPDIR a writable folder of the test."""
    install, home, temporary = tmp_path / "install", tmp_path / "home", tmp_path / "tmp"
    shutil.copytree(PACKAGE, install / "daskmeans", ignore=shutil.ignore_patterns("__pycache__"))
    home.mkdir()
    temporary.mkdir(mode=0o700)
    make_read_only(install)
    make_read_only(home)
    preexec = permission_bits_apply()
    base_env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("NUMBA_", "XDG_", "DASK_")) and key not in ("PYTHONPATH", "HOME", "TMPDIR")
    }
    base_env.update(HOME=str(home), TMPDIR=str(temporary), PYTHONPATH=str(install), PYTHONDONTWRITEBYTECODE="1")

    def run(code, timeout=300, **env):
        return subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(tmp_path),
            env={**base_env, **env},
            preexec_fn=preexec,
        )

    try:
        probe = run(f"open({str(home / 'probe')!r}, 'w')")
    except (subprocess.SubprocessError, OSError) as error:
        pytest.skip(f"cannot start a process without the capabilities that override permissions: {error}")
    if probe.returncode == 0:
        pytest.skip(
            "a read-only folder is writable for the test's subprocess here (root whose capabilities "
            "cannot be dropped): this environment cannot express a read-only install"
        )
    try:
        yield run, {"install": install, "home": home, "tmp": temporary}
    finally:
        make_writable(install)
        make_writable(home)


def cache_files(folder: Path):
    return sorted(path.name for path in folder.rglob("*.nbi"))


def test_kernels_compile_and_cache_from_a_read_only_install_with_a_read_only_home(read_only_install):
    run, paths = read_only_install
    done = run(KERNEL_CALL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no locator available" not in done.stderr
    chosen = Path(done.stdout.strip())
    assert chosen == paths["tmp"] / f"daskmeans-numba-{os.getuid()}"
    assert stat.S_IMODE(chosen.stat().st_mode) == 0o700
    assert any(name.startswith("distance.exact_dist2") for name in cache_files(chosen))
    again = run(KERNEL_CALL)  # the cache is found and reused
    assert again.returncode == 0 and again.stdout == done.stdout, again.stderr[-3000:]


def test_a_writable_per_user_cache_is_left_to_numba(read_only_install, tmp_path):
    run, _ = read_only_install
    cache_home = tmp_path / "xdg-cache"
    done = run(KERNEL_CALL, XDG_CACHE_HOME=str(cache_home))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == ""  # nothing set: Numba's own per-user folder
    assert any(name.startswith("distance.exact_dist2") for name in cache_files(cache_home / "numba"))


def test_a_given_numba_cache_dir_is_kept(read_only_install, tmp_path):
    run, _ = read_only_install
    given = tmp_path / "given-cache"
    done = run(KERNEL_CALL, NUMBA_CACHE_DIR=str(given))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(given) and cache_files(given)


def test_a_temporary_cache_folder_of_someone_else_is_not_used(read_only_install):
    run, paths = read_only_install
    shared = paths["tmp"] / f"daskmeans-numba-{os.getuid()}"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)  # writable by anyone: someone could have left cache files to be loaded as code
    done = run(KERNEL_CALL)
    assert done.returncode == 0, done.stderr[-3000:]
    chosen = Path(done.stdout.strip())
    assert chosen.parent == paths["tmp"] and chosen != shared and chosen.name.startswith("daskmeans-numba-")
    assert not cache_files(shared)


def test_a_fit_on_worker_processes_from_a_read_only_install(read_only_install):
    run, _ = read_only_install
    code = (
        "import numpy as np\n"
        "from distributed import Client, LocalCluster\n"
        "from daskmeans import KMeans\n"
        "if __name__ == '__main__':\n"
        "    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as c, \\\n"
        "            Client(c) as client:\n"
        "        X = np.random.default_rng(0).normal(size=(2000, 3))\n"
        "        import dask.array as da\n"
        "        model = KMeans(3, random_state=0, client=client).fit(da.from_array(X, chunks=500))\n"
        "        print(model.inertia_ > 0)\n"
    )
    done = run(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("True")
