"""A cluster of separate hosts on one machine (Linux network and mount namespaces) and the tests run on it.

:mod:`.cluster` has :class:`~.cluster.MultiHostCluster` (start and stop, commands on a host, addresses, shaping,
cuts, killing a host's processes, interface counters); :mod:`.netns` the namespace, bridge and traffic-control
steps under it; :mod:`.driver` the scripts run on a host. See README.md in this folder.
"""
