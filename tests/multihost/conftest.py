"""The ``multihost`` fixture: a :class:`~multihost.cluster.MultiHostCluster` per test module.

It skips, with the reason, where the cluster cannot be made: not root, a tool missing, a kernel or container
that refuses network namespaces, veth pairs or bridges, or moto's server not installed. It always takes the
cluster down, even when a test fails; leftovers of a killed run are removed when the next cluster starts.
"""

from __future__ import annotations

import pytest

from .cluster import MultiHostCluster, NamespacesUnavailable
from .netns import check_prerequisites


@pytest.fixture(scope="module")
def multihost(tmp_path_factory):
    """A started cluster (scheduler, 2 workers, a client host, an S3 server), taken down after the module."""
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'daskmeans[s3]')")
    try:
        check_prerequisites()
    except NamespacesUnavailable as error:
        pytest.skip(f"no multi-host cluster here: {error}")
    cluster = MultiHostCluster(log_dir=tmp_path_factory.mktemp("multihost-logs"))
    try:
        cluster.start()
    except NamespacesUnavailable as error:
        pytest.skip(f"no multi-host cluster here: {error}")
    except RuntimeError as error:
        if "moto_server is not installed" in str(error):
            pytest.skip(str(error))
        raise
    try:
        yield cluster
    finally:
        cluster.stop()


def logs_of(cluster: MultiHostCluster) -> str:
    """The last lines of every service's log, for a failure's message (:meth:`MultiHostCluster.logs`)."""
    return cluster.logs()
