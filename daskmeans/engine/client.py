"""Which Dask scheduler runs the passes: explicit client > active client > configured address > local.

:func:`connect` reaches a scheduler (:class:`~daskmeans.engine.cluster.ClusterSpec` is where a command of the
CLI runs). :func:`run_pinned` runs one task on one worker, for sequential loops near their data.
``distributed`` is imported only where a cluster is used, so that ``import daskmeans`` and a fit on the threaded
scheduler do without it.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from functools import partial

import dask
from dask._expr import LLGExpr
from dask._task_spec import DataNode, Task, convert_legacy_graph, cull, fuse_linear_task_spec
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

from .. import config
from ..exceptions import SchedulerConnectionError
from .deadline import GivenUp, check_budget, local_callbacks, wait_for_futures
from .graph import DriverCombine, map_blocks_delayed, tree_reduce, unfold_driver_combines
from .pass_progress import active_watch


def connect(address: str, *, timeout: str | float | None = None, security=None):
    """Connect to a scheduler, failing with a clear message instead of hanging.

    Before the client is made, the address is checked (scheme, port, a transport this installation has, TLS
    settings for ``tls://`` and ``wss://``) and the scheduler's handshake is awaited within ``timeout``: a port that
    accepts the connection but never answers would otherwise hang ``distributed.Client`` for good.

    Parameters
    ----------
    address : str
        ``tcp://host:port`` or ``tls://host:port``.
    timeout : str or float, optional
        How long to wait for the scheduler (a float: seconds); None:
        :data:`~daskmeans.config.CONNECT_TIMEOUT_SECONDS`, read at call time.
    security : distributed.Security, optional
        TLS certificates for ``tls://`` addresses (default: Dask's configuration,
        ``distributed.comm.tls.*``).

    Raises
    ------
    SchedulerConnectionError
        The address is malformed or cannot be used here, or the scheduler did not answer within ``timeout``.
    """
    from dask.utils import parse_timedelta
    from distributed import Client, Security

    if timeout is None:
        timeout = f"{config.CONNECT_TIMEOUT_SECONDS:g}s"
    seconds = parse_timedelta(timeout, default="seconds")
    if security is None:
        security = Security()
    connection_args = usable_address(address, security)
    await_handshake(address, seconds, connection_args)
    try:
        return Client(address, timeout=timeout, security=security, set_as_default=True)
    except (OSError, TimeoutError) as error:
        raise SchedulerConnectionError(
            f"Could not connect to the Dask scheduler at {address!r} within {timeout}: {error}. "
            "Check that the scheduler is running and the address (and TLS settings) are right."
        ) from error


#: Schemes whose connections are encrypted, and so need TLS certificates.
TLS_SCHEMES = ("tls", "wss")


def usable_address(address: str, security) -> dict:
    """Check that ``address`` names a transport this installation can use, with what it needs; return the
    connection arguments of a client.

    Raises
    ------
    SchedulerConnectionError
        Malformed address, unknown or unavailable transport (``ucx://`` without ``distributed-ucxx``), or an
        encrypted one without TLS settings.
    """
    from distributed.comm import parse_address
    from distributed.comm.registry import get_backend

    try:
        scheme = parse_address(address, strict=True)[0]
        backend = get_backend(scheme)
    except ValueError as error:
        raise SchedulerConnectionError(
            f"Bad scheduler address {address!r}: {one_line(error)}. Use tcp://HOST:PORT (or tls://HOST:PORT), the "
            "address the scheduler prints when it starts."
        ) from error
    try:
        backend.get_connector()
    except Exception as error:  # noqa: BLE001 - a transport that cannot start fails in ways of its own
        raise SchedulerConnectionError(
            f"Scheduler address {address!r}: this installation cannot use the {scheme}:// transport "
            f"({type(error).__name__}: {one_line(error)}). Install its package (for ucx://: distributed-ucxx, "
            "or distributed-ucxx-cu12/-cu13 from PyPI), or use the scheduler's tcp:// address."
        ) from error
    connection_args = security.get_connection_args("client")
    if scheme in TLS_SCHEMES and connection_args.get("ssl_context") is None:
        raise SchedulerConnectionError(
            f"Scheduler address {address!r} is encrypted ({scheme}://) but no TLS settings were given: set the "
            "CA file, client certificate and key in Dask's configuration (DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT, DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY, or "
            "distributed.comm.tls in a Dask config file), pass security= to connect(), or use a tcp:// address."
        )
    return connection_args


def await_handshake(address: str, seconds: float, connection_args: dict):
    """Open a connection to ``address`` and wait for the scheduler's handshake, at most ``seconds`` (plus
    :data:`~daskmeans.config.CONNECT_HANDSHAKE_GRACE_SECONDS`).

    Runs on an event loop of its own, in a thread, so it works whether or not the caller runs one.

    Raises
    ------
    SchedulerConnectionError
        No connection, or no answer, within ``seconds``; or an answer that is not a Dask handshake.
    """
    import asyncio
    import concurrent.futures

    from distributed.comm import connect as open_comm

    async def handshake():
        comm = await open_comm(address, timeout=seconds, **connection_args)
        await comm.close()

    async def within_time():
        await asyncio.wait_for(handshake(), seconds + config.CONNECT_HANDSHAKE_GRACE_SECONDS)

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="daskmeans-handshake") as pool:
        try:
            pool.submit(asyncio.run, within_time()).result()
        except TimeoutError as error:
            raise SchedulerConnectionError(
                f"The Dask scheduler at {address!r} did not answer within {seconds:g} s: something accepts "
                "connections there but does not speak Dask's protocol (or is stuck). Check the address and port "
                "(the scheduler prints its address when it starts), or raise --connect-timeout."
            ) from error
        except OSError as error:
            raise SchedulerConnectionError(
                f"Could not connect to the Dask scheduler at {address!r} within {seconds:g} s: {one_line(error)}. "
                "Check that the scheduler is running and the address (and TLS settings) are right."
            ) from error
        except Exception as error:  # noqa: BLE001 - whatever answered, it was not a Dask scheduler
            raise SchedulerConnectionError(
                f"What answers at {address!r} is not a Dask scheduler ({type(error).__name__}: "
                f"{one_line(error)}). Check the address and port."
            ) from error


def scheduler_lost(client, error: BaseException) -> bool:
    """Whether ``error``, raised while ``client`` was in use, comes from losing its scheduler.

    Which error a lost scheduler raises depends on when the run next talks to it: a connection error, a future
    cancelled for the lost connection, or, once the client has given up reconnecting and closed itself, a
    ``ClosedClientError`` from the next graph it is sent. A connection error can come before the client has
    noticed (its status still ``"running"``, as when the scheduler dies while it gathers results): the scheduler
    is then asked for a handshake (:func:`scheduler_answers`).
    """
    from distributed.client import ClosedClientError, FutureCancelledError

    if isinstance(error, FutureCancelledError) and error.reason == "scheduler-connection-lost":
        return True
    if not isinstance(error, (OSError, TimeoutError, FutureCancelledError, ClosedClientError)):
        return False
    return client.status != "running" or not scheduler_answers(client)


def scheduler_workers(client) -> dict:
    """The scheduler's description of each worker, ``{address: info}``, asked of the scheduler now.

    A client that has lost its scheduler answers ``scheduler_info()`` with an empty description (no ``"workers"``
    entry): that is raised as the lost connection it is, so the caller's error names the scheduler
    (:func:`scheduler_lost`), not a missing key.
    """
    info = client.scheduler_info(n_workers=-1)
    if "workers" not in info:
        raise SchedulerConnectionError(
            f"the client has lost its Dask scheduler (status {client.status!r}): it describes no workers"
        )
    return info["workers"]


def scheduler_answers(client, seconds: float = 2.0) -> bool:
    """Whether ``client``'s scheduler answers a handshake within ``seconds`` (a live scheduler answers in
    milliseconds; a dead one refuses the connection at once or, cut off, lets it time out)."""
    try:
        address = client.scheduler.address
        await_handshake(address, seconds, client.security.get_connection_args("client"))
    except (SchedulerConnectionError, AttributeError):
        return False
    return True


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


#: Values of Dask's ``scheduler`` setting that name a scheduler of this process.
LOCAL_SCHEDULERS = ("threads", "threading", "sync", "synchronous", "single-threaded")


def resolve_client(client=None):
    """Return the distributed client to use, or None to run on the local threaded scheduler.

    Parameters
    ----------
    client : distributed.Client, optional
        Used as is when given. Otherwise, with Dask's ``scheduler`` set to a scheduler of this process
        (``dask.config.set(scheduler="threads")``, as Dask itself obeys over an active client), None.
    """
    if client is not None:
        return client
    if dask.config.get("scheduler", None) in LOCAL_SCHEDULERS:
        return None
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        pass
    address = dask.config.get("scheduler-address", None)
    if address:
        return connect(address)
    return None


def compute_now(*objects, client=None):
    """Compute dask collections on ``client`` (or the local scheduler) and return their values.

    While a :class:`~daskmeans.engine.pass_progress.PassWatch` is active, the block tasks computed (and those
    persisted since the last computation) are one pass to it, which ends when the values are here. Inside a fit's
    ``max_time`` budget (:func:`~daskmeans.engine.deadline.budget_until`), nothing is started once it has ended and
    the computation stops at its end, raising :class:`~daskmeans.engine.deadline.BudgetSpent`.
    """
    if client is None:
        client = resolve_client(None)
    watch = active_watch()
    if watch is None:
        return _compute(objects, client)
    try:
        return _compute(objects, client, watch)
    finally:
        watch.finished()


def _compute(objects, client, watch=None):
    check_budget()  # a pass is not started once the fit's budget has ended
    if any(isinstance(o, DriverCombine) for o in objects):
        return _compute_with_driver_combines(objects, client, watch)
    if client is None:
        if watch is not None:
            watch.submitted(_graph_of(objects))
        return dask.compute(*objects, callbacks=local_callbacks())
    if objects and all(isinstance(o, Delayed) for o in objects):
        futures = client.get(*_own_graph(objects, watch, client), sync=False)
    else:
        if watch is not None:
            watch.submitted(_graph_of(objects), client)
        futures = client.compute(list(objects))
    wait_for_futures(futures)
    return tuple(client.gather(futures))


def _compute_with_driver_combines(objects, client, watch):
    """Compute the inputs of every :class:`DriverCombine` with the other objects in one submission; combine here."""
    flat, finish = unfold_driver_combines(objects)
    return finish(_compute(tuple(flat), client, watch))


def _own_graph(objects, watch=None, client=None):
    """The graph and keys of daskmeans' own task graphs (:mod:`daskmeans.engine.graph`), ready to submit.

    They are submitted as they are, without the collection optimizations of ``Client.compute`` (whose cost
    exceeds the scheduler's round trip on small passes), culled, and fused along linear chains: reading a block
    and working on it stay one task, so the block is never a result held (and counted, and spilled) in worker
    memory. Every submission of daskmeans goes this one way, so a block's key gets the same task in each: a key
    the scheduler still remembers from the last pass, given another task by the next one, is what Dask warns
    about as "different `run_spec`" (and may then run the old one).

    The graph goes to the client as an expression with a token of its own: the client would otherwise tokenize
    every task of it (hashing each task's arguments), a cost on the driver that grows with the blocks of a pass.
    Its keys already name the tasks uniquely, so no token of its contents is needed.
    """
    keys = [o.key for o in objects]
    graph = cull(convert_legacy_graph(_flat_graph(objects)), keys)
    if watch is not None:
        watch.submitted(graph, client)
    fused = fuse_linear_task_spec(_reads_inside_their_tasks(graph, set(keys)), keys)
    return LLGExpr(fused, _determ_token=uuid.uuid4().hex), keys


def _reads_inside_their_tasks(graph: dict, keys) -> dict:
    """``graph`` with each read of the input (a task of the input's own graph that depends on stored data alone,
    such as the read of a Zarr chunk) fused into the one daskmeans task that uses it, when only one does.

    Dask's linear fusion fuses a read with its task only when that task depends on nothing else and its result goes
    to one task: a step that also takes the block's state from the last iteration, or a block task whose result
    goes to several (a sample cut into segments), would leave the block a result of its own, held in the worker's
    memory (and counted, and spilled) while the next block is read, and a task more for the scheduler. Reads that
    feed several tasks, and requested keys, stay as they are; daskmeans' own tasks are never fused here, so the
    block tasks of a reduction stay tasks of their own.
    """
    dependents = {}
    for key, node in graph.items():
        for dependency in node.dependencies:
            dependents.setdefault(dependency, []).append(key)
    reads = {
        key: node
        for key, node in graph.items()
        if isinstance(node, Task)
        and key not in keys
        and not _is_own(key)
        and len(dependents.get(key, ())) == 1
        and _is_own(dependents[key][0])
        and all(isinstance(graph.get(dependency), DataNode) for dependency in node.dependencies)
    }
    fused = {}
    for key, node in graph.items():
        if key in reads:
            continue
        mine = [reads[dependency] for dependency in node.dependencies if dependency in reads]
        fused[key] = Task.fuse(*mine, node, key=key) if mine else node
    return fused


def _is_own(key) -> bool:
    """Whether ``key`` names a task of daskmeans (its name starts with ``daskmeans-``)."""
    name = key[0] if isinstance(key, tuple) else key
    return isinstance(name, str) and name.startswith("daskmeans-")


def _flat_graph(objects) -> dict:
    """The tasks of ``objects``' graphs as one dict, merged layer by layer.

    Each task of a pass is a layer of its own, and a high-level graph finds a key by asking each layer in turn:
    ``dict(graph)`` would take time quadratic in the tasks of a pass, most of a pass's time at thousands of blocks.
    """
    graph = {}
    for layer in HighLevelGraph.merge(*(o.__dask_graph__() for o in objects)).layers.values():
        graph.update(layer)
    return graph


def _graph_of(objects):
    """The merged graph of ``objects`` (a mapping of keys to tasks)."""
    return HighLevelGraph.merge(*(o.__dask_graph__() for o in objects))


def submit_now(*objects, client, placement=None):
    """Submit daskmeans' own delayed graphs to ``client`` in one message; their futures, in order.

    ``placement`` maps task keys to the address of the worker each runs on (a pass's task to the worker holding
    its blocks and states: the scheduler, left to itself, may send it to a worker that is idle now and have the
    blocks moved), loosely: a task whose worker has left runs elsewhere.
    """
    graph = _own_graph(objects, active_watch(), client)
    if not placement:
        return client.get(*graph, sync=False)
    # a callable annotation is evaluated per key on the scheduler; an empty list leaves a task unrestricted
    workers = defaultdict(list, {key: [address] for key, address in placement.items()})
    with dask.annotate(workers=workers.__getitem__, allow_other_workers=True):
        return client.get(*graph, sync=False)


def persist_and_compute(kept, wanted, client):
    """Submit daskmeans' own delayed graphs ``kept`` (their results stay on the cluster) and ``wanted`` (their
    values come back, :class:`~daskmeans.engine.graph.DriverCombine` accepted) to ``client`` in one graph: one
    round trip to the scheduler where a persist and a compute made two.

    Returns
    -------
    kept : tuple of Delayed
        One per ``kept``, each holding its future (as :func:`persist_now` gives them).
    values : tuple
        The values of ``wanted``.
    """
    flat, finish = unfold_driver_combines(wanted)
    watch = active_watch()
    try:
        futures = submit_now(*kept, *flat, client=client)
        wait_for_futures(futures)
        values = client.gather(list(futures[len(kept) :]))
    finally:
        if watch is not None:
            watch.finished()
    held = tuple(Delayed(future.key, {future.key: future}) for future in futures[: len(kept)])
    return held, finish(values)


def keep_and_reduce(outputs, report_of, combine, name: str, part_bytes: int, client):
    """Keep the block (or group) ``outputs`` of an iterative pass on the cluster, and reduce ``report_of`` of each
    in :func:`~daskmeans.engine.graph.tree_reduce`'s tree: one graph (:func:`persist_and_compute`), or a persist
    and a compute on the local scheduler (``client`` None).

    Returns
    -------
    outputs : tuple of Delayed
        Held where they were computed.
    reduced : object
        The reduction of the reports (tasks ``daskmeans-NAME-report-...`` and ``daskmeans-NAME-combine-...``).
    """
    if client is None:  # the reports of the persisted outputs: of the graphs, they would compute them again
        outputs = persist_now(*outputs, client=None)
    reports = map_blocks_delayed(partial(_report_unless_given_up, report_of), f"{name}-report", [[o] for o in outputs])
    reduction = tree_reduce(reports, combine, name, part_bytes=part_bytes)
    if client is None:
        (reduced,) = compute_now(reduction, client=None)
        return outputs, reduced
    outputs, (reduced,) = persist_and_compute(outputs, [reduction], client)
    return outputs, reduced


def _report_unless_given_up(report_of, output):
    return output if isinstance(output, GivenUp) else report_of(output)


def persist_now(*objects, client=None):
    """Persist dask collections on the cluster (or compute them into local memory)."""
    if client is None:
        client = resolve_client(None)
    if client is None:
        watch = active_watch()
        if watch is not None:
            watch.submitted(_graph_of(objects))
        return dask.persist(*objects, callbacks=local_callbacks())
    if objects and all(isinstance(o, Delayed) for o in objects):
        return tuple(Delayed(future.key, {future.key: future}) for future in submit_now(*objects, client=client))
    watch = active_watch()
    if watch is not None:
        watch.submitted(_graph_of(objects), client)
    return tuple(client.persist(list(objects)))


def run_pinned(client, function, keys, *args, key):
    """Run ``function(pieces, compute, *args)`` on one worker of ``client``; on another if that worker dies.

    The task is pinned to the first worker (by address), loosely: when it leaves the cluster (before or while it
    runs), the scheduler runs the task again on a worker that is left, from the same inputs, and the data it
    read is recomputed from its lineage, so the result is the same. A cluster without workers at that moment
    (restarting, or scaled to zero) gets the task unpinned: it runs on the first worker that joins.

    Parameters
    ----------
    client : distributed.Client
    function : callable
        Module-level (it travels to the worker). ``pieces`` are ``keys`` as futures of that worker's client and
        ``compute(graph)`` computes a graph from the worker and returns its value.
    keys : list of list of str
        Keys of collections persisted on the cluster (e.g. the blocks of a sample), as nested lists.
    *args
        Further arguments of ``function``.
    key : str
        The task's key (unique; its prefix names it on the dashboard).

    Returns
    -------
    result
        What ``function`` returned.
    address : str
        The worker that ran it.
    """
    # asked of the scheduler now: Client.scheduler_info() may answer from a cache that lists no workers
    workers = sorted(client.nthreads())
    placement = {"workers": workers[:1], "allow_other_workers": True} if workers else {}
    future = client.submit(
        _run_with_worker_client, config.carried(), function, keys, *args, pure=False, key=key, **placement
    )
    return future.result()


def _run_with_worker_client(settings, function, keys, *args):
    from distributed import Future, get_worker, worker_client

    with config.applied(settings), worker_client() as client:
        pieces = [[Future(name, client=client) for name in group] for group in keys]
        result = function(pieces, lambda graph: client.compute(graph).result(), *args)
    return result, get_worker().address
