"""Block-wise map and tree reduction, with task names that start with ``daskmeans-``.

The passes' graphs are written as task-spec graphs directly (:func:`task`), not through ``dask.delayed`` calls:
on a small dataset building and submitting a pass through ``delayed`` cost about three times the scheduler's own
round trip (tens of milliseconds per iteration). :func:`daskmeans.engine.client.compute_now` submits such graphs
with ``Client.get`` after culling and linear fusion, without the rest of ``Client.compute``'s collection work.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass

import dask
import numpy as np
from dask._task_spec import DataNode, Task, TaskRef, parse_input
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

from .. import config
from .deadline import GivenUp, StopCheck, handed_on, stop_signal
from .pass_progress import active_watch, report_block
from .slabs import stored_form
from .tree import root_of, subtree_nodes

#: Attribute of a dask array holding its per-block delayed objects (computed once per array).
_BLOCKS_ATTRIBUTE = "_daskmeans_blocks"


def blocks_of(array) -> list[Delayed]:
    """One delayed object per row block of a 2-D (or 1-D) dask array (computed once per array object)."""
    blocks = getattr(array, _BLOCKS_ATTRIBUTE, None)
    if blocks is None:
        blocks = list(array.to_delayed(optimize_graph=True).ravel())
        try:
            setattr(array, _BLOCKS_ATTRIBUTE, blocks)
        except AttributeError:  # an array type that takes no attributes: recomputed next time
            pass
    return list(blocks)


def _node(value, dependencies: dict):
    """``value`` as a task argument: delayed objects (also inside lists, tuples and dicts) become references to
    their keys, collected in ``dependencies`` by key; futures (``distributed.Future`` is a ``TaskRef``) stay
    references to theirs; anything else is data."""
    if isinstance(value, Delayed):
        dependencies.setdefault(value.key, value)
        return TaskRef(value.key)
    if isinstance(value, (list, tuple)) and any(isinstance(v, (Delayed, TaskRef, list, tuple, dict)) for v in value):
        return parse_input(type(value)(_node(v, dependencies) for v in value))
    if isinstance(value, dict):
        return parse_input({k: _node(v, dependencies) for k, v in value.items()})
    return value


#: ``task(..., settings=CARRIED)``: the settings this process has changed, read when the task is made.
CARRIED = object()


def task(key, function, *args, settings=CARRIED) -> Delayed:
    """The delayed call ``function(*args)`` under ``key``, written as one task-spec task; ``args`` may hold
    delayed objects (anywhere in lists, tuples and dicts), which become its dependencies.

    ``settings`` are the settings the task carries to the process that runs it (:func:`daskmeans.config.carried`,
    read now by default; a builder of many tasks reads it once and passes it): when some differ from their
    defaults, the task runs ``function`` with them applied (:func:`daskmeans.config.run_with`)."""
    if settings is CARRIED:
        settings = config.carried()
    dependencies = {}
    nodes = [_node(arg, dependencies) for arg in args]
    layer = key if isinstance(key, str) else "-".join(str(part) for part in key)
    spec = Task(key, function, *nodes) if settings is None else Task(key, config.run_with, settings, function, *nodes)
    graph = HighLevelGraph.from_collections(layer, {key: spec}, dependencies=list(dependencies.values()))
    return Delayed(key, graph, layer=layer)


def shared(value, name: str):
    """Put a driver-side object (centers, a sample) into the graph once, shared by all block tasks.

    A NumPy array of at most :data:`~daskmeans.config.SHARED_INLINE_BYTES` is returned as it is, to travel inside
    each task that uses it: a task of its own would cost each pass a dispatch and a transfer between workers
    before the block tasks can start, more than copying a few kilobytes per task.
    """
    if isinstance(value, np.ndarray) and value.nbytes <= config.SHARED_INLINE_BYTES:
        return value
    key = f"daskmeans-{name}-{tokenize(value)}"
    return Delayed(key, HighLevelGraph.from_collections(key, {key: DataNode(key, value)}), layer=key)


def map_blocks_delayed(
    function, name: str, block_args: list[list], *common_args, reads_data=False, energy_of=None
) -> list[Delayed]:
    """Apply ``function(*per_block_args, *common_args)`` to every block.

    Parameters
    ----------
    function : callable
    name : str
        Pass name; task keys are ``("daskmeans-NAME-TOKEN", i)``.
    block_args : list of lists
        ``block_args[i]`` are the per-block arguments of block ``i`` (delayed blocks, offsets, ...).
    *common_args
        Arguments shared by every block (wrap large ones with :func:`shared`).
    reads_data : bool
        The tasks are a pass's work over the data (a block of rows, or a state holding them, first): while a
        :class:`~daskmeans.engine.pass_progress.PassWatch` is active, each reports its end and its rows to it.
    energy_of : callable, optional
        ``energy_of(result) -> (sse, weight)`` of a block's result, reported with it: the watch shows the mean
        squared distance of the rows done so far while the pass runs.
    """
    watch = active_watch() if reads_data else None
    settings = config.carried()
    token = tokenize(
        function,
        name,
        block_args,
        common_args,
        watch is not None,
        energy_of,
        *([] if settings is None else [settings[1]]),
    )
    key = f"daskmeans-{name}-{token}"
    if watch is None:
        return [task((key, i), function, *args, *common_args, settings=settings) for i, args in enumerate(block_args)]
    watch.register(key)
    # the watch finds its tasks by their function, report_block: the settings are applied inside it
    inner = function if settings is None else functools.partial(config.run_with, settings, function)
    return [
        task((key, i), report_block, inner, key, energy_of, *args, *common_args, settings=None)
        for i, args in enumerate(block_args)
    ]


@dataclass(frozen=True)
class DriverCombine:
    """The last combine of a tree reduction, left to the driver: :func:`~daskmeans.engine.client.compute_now`
    computes ``inputs`` and calls ``combine`` on their values here, as the combine task would have on a worker.

    On a small pass the combine task costs more than it does: it waits for its inputs to be moved to one worker
    and for a dispatch of its own (a sizeable part of a small pass's round trip), while its inputs are a few
    kilobytes each. Only :func:`~daskmeans.engine.client.compute_now` accepts it.
    """

    inputs: tuple
    combine: object


def unfold_driver_combines(objects):
    """``objects`` with each :class:`DriverCombine` replaced by its inputs, and the function that turns the values
    of that flat list back into one value per object (each driver combine applied here).

    Returns
    -------
    flat : list
    finish : callable
        ``finish(values) -> tuple``, ``values`` being the computed ``flat`` in order.
    """
    flat, spans = [], []
    for o in objects:
        if isinstance(o, DriverCombine):
            spans.append((len(flat), len(o.inputs)))
            flat.extend(o.inputs)
        else:
            spans.append((len(flat), None))
            flat.append(o)

    def finish(values):
        return tuple(
            values[start] if count is None else o.combine(list(values[start : start + count]))
            for o, (start, count) in zip(objects, spans)
        )

    return flat, finish


def tree_reduce(parts: list[Delayed], combine, name: str, split_every: int | None = None, part_bytes=None):
    """Reduce partial results pairwise in a fixed tree, so the result does not depend on the scheduler.

    Parameters
    ----------
    parts : list of Delayed
    combine : callable
        ``combine(list_of_partials) -> partial``; must be associative.
    name : str
    split_every : int, optional
        Fan-in of the tree; None: :data:`~daskmeans.config.SPLIT_EVERY`, read at call time.
    part_bytes : int, optional
        An upper bound on the size of one partial result, from a caller that passes the result straight to
        :func:`~daskmeans.engine.client.compute_now`: when the last combine's inputs total at most
        :data:`~daskmeans.config.DRIVER_COMBINE_BYTES`, that combine runs on the driver (a :class:`DriverCombine`
        is returned; the same tree, the same values).

    Returns
    -------
    Delayed or DriverCombine
    """
    split_every = config.SPLIT_EVERY if split_every is None else split_every
    settings = config.carried()
    token = tokenize(parts, combine, name)
    level = 0
    while len(parts) > 1 or level == 0:
        key = f"daskmeans-{name}-combine-{token}-{level}"
        if (
            1 < len(parts) <= split_every
            and part_bytes is not None
            and len(parts) * part_bytes <= config.DRIVER_COMBINE_BYTES
        ):
            return DriverCombine(tuple(parts), combine)
        parts = [
            task((key, i // split_every), _combine_parts, combine, parts[i : i + split_every], settings=settings)
            for i in range(0, len(parts), split_every)
        ]
        level += 1
    return parts[0]


def _combine_parts(combine, parts):
    """``combine(parts)``, or the :class:`~daskmeans.engine.deadline.GivenUp` of a part whose pass was given up."""
    return handed_on(parts) or combine(parts)


def reduce_in_tree(parts: list, combine, split_every: int | None = None):
    """Reduce computed partial results in one process in the tree :func:`tree_reduce` builds: the same groups
    of consecutive partials, level by level, so the same value to the last bit (``split_every`` None:
    :data:`~daskmeans.config.SPLIT_EVERY`, read at call time)."""
    split_every = config.SPLIT_EVERY if split_every is None else split_every
    level = 0
    while len(parts) > 1 or level == 0:
        parts = [combine(parts[i : i + split_every]) for i in range(0, len(parts), split_every)]
        level += 1
    return parts[0]


@dataclass(frozen=True)
class GroupPass:
    """One pass of :func:`chained_group_pass`: its group tasks (each ``(carried, results, states)``) and the
    ``(carried, results)`` of each for the other groups (None when the pass keeps no state: the group tasks'
    outputs are small then). Delayed objects, or futures once submitted (:meth:`submitted`). ``reduction`` is how
    its results are reduced and finished, by the driver (:meth:`result`) and by the pass chained after it;
    ``placement`` the worker of each group's task, by key (:func:`~daskmeans.engine.client.submit_now`).

    The driver reduces the results itself rather than in a task of their own on a worker: there such a task can
    wait behind the next pass's group task, which holds the worker's thread for a whole pass, and the driver would
    then hear of each pass only when the next one ended."""

    groups: list
    shares: list | None
    reduction: tuple = ()
    placement: dict | None = None

    def objects(self) -> list:
        """Everything to submit, in the order :meth:`submitted` takes the futures back."""
        return [*self.groups, *(self.shares or [])]

    def submitted(self, futures) -> GroupPass:
        n = len(self.groups)
        shares = None if self.shares is None else list(futures[n:])
        return GroupPass(list(futures[:n]), shares, self.reduction, self.placement)

    def handed_over(self) -> list:
        """What the submitted pass hands on, one future per group (what :meth:`result` gathers)."""
        return self.shares or self.groups

    def result(self):
        """The submitted pass's result, ``finish`` of its reduced results: gathered from the groups (waiting for
        them) and reduced on the driver."""
        handed = self.handed_over()
        return _reduce_groups(handed[0].client.gather(handed), self.reduction)


def chained_group_pass(
    function,
    name: str,
    block_args,
    *common_args,
    groups: list[list[int]],
    combine,
    finish,
    finish_args=(),
    previous: GroupPass | None = None,
    start=None,
    keeps_state=False,
    split_every: int | None = None,
    workers: list | None = None,
) -> GroupPass:
    """One pass of an iterative algorithm over blocks held by the workers, one task per group of blocks (the
    blocks one worker holds), chained to the pass before it without a round trip through one task.

    The task of a group reduces the previous pass's results itself (every group gets the same value), computes
    ``carried = finish(reduced, previous_carried, *finish_args)``, the value its blocks take (an iteration's new
    centers), and applies ``function`` to each of its blocks. A pass is then one task per worker instead of one per
    block, and the next pass starts as soon as the workers have exchanged their results, without waiting for one
    task to combine them and for its result to be moved back. What a group hands the others is the nodes of
    :func:`tree_reduce`'s tree that its blocks cover (:func:`~daskmeans.engine.tree.subtree_nodes`): a few when its
    blocks are consecutive, as :func:`~daskmeans.engine.placement.placed_groups` makes them of blocks placed in
    runs, so the bytes exchanged do not grow with the blocks. The tree is the same whatever the grouping, so
    results do not depend on where the blocks are (tested). No progress reports.

    Parameters
    ----------
    function : callable
        ``function(*block_args[i], carried, *common_args) -> result``; with ``keeps_state``, ``-> (state,
        result)``, and with ``block_args=None`` it is given the block's state from ``previous`` instead of
        ``block_args[i]``.
    name, common_args
        As :func:`map_blocks_delayed`.
    block_args : list of lists, or None
        Per block, as :func:`map_blocks_delayed`; None: each block's state kept by ``previous``.
    groups : list of lists of int
        A partition of the block indices, the same for every pass of a chain.
    combine, split_every
        As :func:`tree_reduce` (``split_every`` None: :data:`~daskmeans.config.SPLIT_EVERY`, read at call time).
    finish : callable
        ``finish(reduced, carried, *finish_args) -> carried`` of the next pass.
    previous : GroupPass, optional
        The pass before (submitted). Its results are reduced and finished as its own ``combine`` and ``finish``
        say, so that a chain may go on with a pass of another kind (bounds set up after plain passes).
    start : object, optional
        The value this pass's blocks take instead of the one ``previous`` gives (required without ``previous``).
    keeps_state : bool
        ``function`` returns a state per block, kept in the group task's output for the next pass; each group
        then also has a small task with its results alone, which is what the other groups' tasks fetch.
    workers : list, optional
        The address of the worker holding each group's blocks (None: any), where its task is placed
        (:func:`~daskmeans.engine.placement.placed_groups`, the pass's ``placement``).
    """
    covered = sorted(i for group in groups for i in group)
    n_blocks = len(covered) if block_args is None else len(block_args)
    if covered != list(range(n_blocks)) or not all(groups):
        raise ValueError(f"groups must partition the {n_blocks} block indices once each, got {groups}")
    if start is None and previous is None:
        raise ValueError("the first pass of a chain needs start")
    split_every = config.SPLIT_EVERY if split_every is None else split_every
    reduction = (combine, split_every, finish, finish_args, n_blocks)
    settings = config.carried()
    # each pass of a chain is new work: a fresh key costs nothing, where hashing the arguments costs the driver
    # time on every pass
    key = f"daskmeans-{name}-{uuid.uuid4().hex}"
    from_previous = None if previous is None else (previous.shares or previous.groups, previous.reduction)
    stop = stop_signal()
    tasks = []
    for g, group in enumerate(groups):
        args = None if block_args is None else [block_args[i] for i in group]
        own = None if block_args is not None else previous.groups[g]
        tasks.append(
            task(
                (f"{key}-group", g),
                _group_pass,
                function,
                list(group),
                args,
                own,
                from_previous if start is None else None,
                start,
                reduction,
                keeps_state,
                stop,
                *common_args,
                settings=settings,
            )
        )
    shares = (
        [task((f"{key}-share", g), _share, t, settings=settings) for g, t in enumerate(tasks)] if keeps_state else None
    )
    placement = {t.key: worker for t, worker in zip(tasks, workers or ()) if worker is not None}
    return GroupPass(tasks, shares, reduction, placement)


def _share(output):
    return output if isinstance(output, GivenUp) else (output[0], output[1])


def _reduce_groups(outputs, reduction):
    given_up = handed_on(outputs)
    if given_up is not None:
        return given_up
    combine, split_every, finish, finish_args, n_blocks = reduction
    nodes = [node for output in outputs for node in output[1]]
    return finish(root_of(nodes, n_blocks, combine, split_every), outputs[0][0], *finish_args)


def _group_pass(
    function, indices, group_args, own_previous, previous, start, reduction, keeps_state, stop, *common_args
):
    carried = start if previous is None else _reduce_groups(*previous)
    if isinstance(carried, GivenUp) or isinstance(own_previous, GivenUp):
        return carried if isinstance(carried, GivenUp) else own_previous
    if group_args is None:
        group_args = [[state] for state in own_previous[2]]
    given_up = StopCheck(stop)  # the budget's stop signal: the driver no longer waits for this pass
    outputs = []
    for args in group_args:
        if outputs and given_up():
            return GivenUp()
        outputs.append(function(*args, carried, *common_args))
    combine, split_every, _, _, n_blocks = reduction
    results = outputs if not keeps_state else [out[1] for out in outputs]
    # the nodes of the tree this group's blocks cover: a few per group whose blocks are consecutive, which is
    # what the other groups fetch, instead of one result per block
    nodes = subtree_nodes(indices, results, n_blocks, combine, split_every)
    return carried, nodes, None if not keeps_state else [out[0] for out in outputs]


def block_offsets(array) -> np.ndarray:
    """Global index of the first row of each block."""
    return np.concatenate([[0], np.cumsum(array.chunks[0])[:-1]]).astype(np.int64)


def stored_blocks(array) -> list[Delayed]:
    """One delayed object per row block of the data *as stored* (see :mod:`daskmeans.engine.slabs`): a task
    converts it slab by slab (:func:`~daskmeans.engine.slabs.slabs`), never whole."""
    return blocks_of(stored_form(array))


def block_args(array, weights=None, *states) -> list[list]:
    """Per-block argument lists: the data block as stored, its first row's index, its weights (or None), states."""
    data_blocks = stored_blocks(array)
    offsets = block_offsets(array)
    weight_blocks = blocks_of(weights) if weights is not None else [None] * len(data_blocks)
    state_blocks = [list(state) for state in states]
    return [
        [data_blocks[i], int(offsets[i]), weight_blocks[i], *[state[i] for state in state_blocks]]
        for i in range(len(data_blocks))
    ]


__all__ = [
    "blocks_of",
    "stored_blocks",
    "shared",
    "task",
    "map_blocks_delayed",
    "tree_reduce",
    "DriverCombine",
    "reduce_in_tree",
    "chained_group_pass",
    "GroupPass",
    "unfold_driver_combines",
    "block_offsets",
    "block_args",
    "dask",
]
