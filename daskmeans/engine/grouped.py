"""A reduction pass over data read by each pass, as one task per group of consecutive blocks on a cluster.

A pass of one task per block costs the scheduler a few milliseconds per block and sends each block's partial result
(``k x d`` sums for an assign pass) to the task that combines it, often on another host: at a billion rows in
32 MB blocks that is 16,384 tasks and as many partial results per iteration. :func:`map_reduce_blocks` gives each
worker thread a few tasks instead, each reading its blocks one after the other (:class:`BlockRead`: one block in
memory at a time) and reducing their results where they were made. The groups are whole subtrees of
:func:`~daskmeans.engine.graph.tree_reduce`'s tree (their first block a multiple of ``SPLIT_EVERY**levels``), and a
group task combines its blocks in that tree's order (:class:`TreeAccumulator`), so the result is the same to the
last bit whatever the groups, the workers and their threads.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from dask._task_spec import DataNode, Task, convert_legacy_graph, cull, execute_graph
from dask.delayed import Delayed
from dask.sizeof import sizeof

from .. import config
from .client import _flat_graph
from .deadline import GivenUp, StopCheck, stop_signal
from .graph import map_blocks_delayed, task, tree_reduce
from .pass_progress import active_watch, report_group_block


@dataclass(frozen=True)
class BlockRead:
    """The tasks that make one input block (a culled task-spec graph) and the block's key: the group task that
    comes to the block runs them, so that only one block of its group is in memory at a time."""

    graph: dict
    key: object

    def __call__(self):
        return execute_graph(self.graph, keys=[self.key])[self.key]


class TreeAccumulator:
    """Combines partial results as they come, in the fixed tree of :func:`~daskmeans.engine.graph.reduce_in_tree`:
    ``split_every`` consecutive partials of a level make one of the next, so at most ``split_every - 1`` wait at
    each level.

    Examples
    --------
    >>> acc = TreeAccumulator(sum, split_every=2)
    >>> for part in [1, 2, 3]:
    ...     acc.add(part)
    >>> acc.finish(levels=2)
    6
    """

    def __init__(self, combine, split_every: int):
        self.combine, self.split_every = combine, int(split_every)
        self.levels: list[list] = [[]]

    def add(self, part, level: int = 0):
        while True:
            if len(self.levels) == level:
                self.levels.append([])
            self.levels[level].append(part)
            if len(self.levels[level]) < self.split_every:
                return
            part, self.levels[level] = self.combine(self.levels[level]), []
            level += 1

    def finish(self, levels: int):
        """The node ``levels`` levels up that holds every partial added (the group's subtree root): each level's
        unfinished partials are combined into one of the next, as the tree does with the last, shorter group."""
        for level in range(levels):
            waiting = self.levels[level] if level < len(self.levels) else []
            if waiting:
                self.levels[level] = []
                self.add(self.combine(waiting), level + 1)
        (root,) = self.levels[levels]
        return root


def run_group(function, blocks, common_args, reduction, progress, stop=None, keeps_state=False):
    """Apply ``function(*block_args, *common_args)`` to each block of a group in turn (its reads run just before)
    and reduce the results into the group's subtree root; ``progress`` is ``(pass_name, energy_of)`` or None.

    With ``keeps_state``, ``function`` returns ``(state, result)`` and the group's output is ``(states, root)``:
    the states of its blocks, in order, for the next pass (:func:`revisit_group`). ``stop`` is the budget's stop
    signal (:func:`~daskmeans.engine.deadline.stop_signal`): once the driver has given up the pass, the group stops
    after the block it is on and returns a :class:`~daskmeans.engine.deadline.GivenUp`."""
    combine, split_every, levels = reduction
    accumulator = TreeAccumulator(combine, split_every)
    states = []
    given_up = StopCheck(stop)
    for i, args in enumerate(blocks):
        if i and given_up():
            return GivenUp()
        values = [arg() if isinstance(arg, BlockRead) else arg for arg in args]
        output = function(*values, *common_args)
        if progress is not None:
            report_group_block(*progress, values[0] if values else None, output)
        del values
        if keeps_state:
            states.append(output[0])
            output = output[1]
        accumulator.add(output)
    root = accumulator.finish(levels)
    return (states, root) if keeps_state else root


def run_group_keeping_states(function, blocks, common_args, reduction, progress, stop=None):
    """:func:`run_group` with ``keeps_state``: the first pass of a chain over states held by the workers."""
    return run_group(function, blocks, common_args, reduction, progress, stop, keeps_state=True)


def revisit_group(function, previous, common_args, reduction, progress, stop=None):
    """The next pass over the states of a group (``previous``, a :func:`run_group_keeping_states` output):
    ``function(state, *common_args) -> (state, result)`` on each in turn."""
    return run_group(function, [[state] for state in previous[0]], common_args, reduction, progress, stop, True)


def group_pass(runner, function, name, groups, *common_args, combine, levels, n_blocks, energy_of=None) -> list:
    """One task per group: ``runner(function, groups[g], common_args, ...)`` (:func:`run_group` or one of its
    forms), each reducing its blocks ``levels`` levels up the tree; the tasks report each of the ``n_blocks``
    blocks to the active :class:`~daskmeans.engine.pass_progress.PassWatch`, if any."""
    # each pass is new work: a fresh key costs nothing, where hashing the reads' graphs costs the driver time
    key = f"daskmeans-{name}-{uuid.uuid4().hex}"
    watch = active_watch()
    progress = None
    if watch is not None:
        watch.register(key, blocks=n_blocks)
        progress = (key, energy_of)
    reduction = (combine, config.SPLIT_EVERY, levels)
    stop = stop_signal()
    return [
        task((key, g), runner, function, group, list(common_args), reduction, progress, stop)
        for g, group in enumerate(groups)
    ]


def in_groups(block_args, client, part_bytes) -> tuple[list, int] | None:
    """How a pass over ``block_args`` runs on ``client`` in groups: ``(groups of block reads, levels)``, or None
    for one task per block (no distributed client, too few blocks for :func:`group_levels`, or blocks that
    cannot be read on their own: :func:`block_reads`)."""
    if client is None or not hasattr(client, "nthreads"):
        return None
    levels = group_levels(len(block_args), sum(client.nthreads().values()), part_bytes)
    reads = block_reads(block_args) if levels else None
    if reads is None:
        return None
    size = config.SPLIT_EVERY**levels
    return [reads[start : start + size] for start in range(0, len(reads), size)], levels


def group_levels(n_blocks: int, n_threads: int, part_bytes: int | None) -> int:
    """The tree level of a pass's groups: each group is one node of it, ``SPLIT_EVERY**level`` blocks. The highest
    level that still leaves :data:`~daskmeans.config.GROUP_TASKS_PER_THREAD` groups per worker thread, below the
    tree's root, and whose waiting partials (``SPLIT_EVERY - 1`` a level) stay within
    :data:`~daskmeans.config.GROUP_PARTIALS_BYTES`; 0 means one task per block.

    Examples
    --------
    >>> group_levels(16_384, n_threads=4, part_bytes=6_000)
    3
    >>> group_levels(16, n_threads=4, part_bytes=6_000)
    0
    """
    split_every = config.SPLIT_EVERY
    wanted = max(1, int(n_threads)) * config.GROUP_TASKS_PER_THREAD
    most = config.GROUP_PARTIALS_BYTES // max(1, (split_every - 1) * int(part_bytes or 0)) if part_bytes else 64
    level = 0
    while level < most and -(-n_blocks // split_every ** (level + 1)) >= max(wanted, 2):
        level += 1
    return level


def block_reads(block_args: list[list]) -> list[list] | None:
    """``block_args`` with each delayed argument replaced by its :class:`BlockRead`, or None when a block cannot be
    read on its own: its tasks share one with another block's (a value computed from several blocks), depend on
    results held by the cluster, or hold a large value of their own."""
    delayed = [arg for args in block_args for arg in args if isinstance(arg, Delayed)]
    if not delayed:
        return None
    graph = convert_legacy_graph(_flat_graph(delayed))
    seen: dict = {}
    reads = {}
    for arg in delayed:
        if not isinstance(graph.get(arg.key), Task):  # a result held by the cluster (a future), or a value
            return None
        sub = cull(graph, [arg.key])
        for key, node in sub.items():
            if not isinstance(node, (Task, DataNode)) or any(dep not in graph for dep in node.dependencies):
                return None
            if isinstance(node, DataNode) and sizeof(node.value) > config.SHARED_INLINE_BYTES:
                return None
            if isinstance(node, Task) and seen.setdefault(key, arg.key) != arg.key:
                return None
        reads[arg.key] = BlockRead(sub, arg.key)
    return [[reads[arg.key] if isinstance(arg, Delayed) else arg for arg in args] for args in block_args]


def map_reduce_blocks(function, name, block_args, *common_args, combine, client, part_bytes=None, energy_of=None):
    """:func:`~daskmeans.engine.graph.map_blocks_delayed` of a pass over the data (``reads_data``) reduced by
    :func:`~daskmeans.engine.graph.tree_reduce`, with the same result to the last bit: on a distributed
    ``client``, as one task per group of consecutive blocks (:func:`group_levels`) where every block can be read
    on its own (:func:`block_reads`); otherwise one task per block.

    Returns
    -------
    Delayed or DriverCombine
        As :func:`~daskmeans.engine.graph.tree_reduce` (``part_bytes`` as there).
    """
    layout = in_groups(block_args, client, part_bytes)
    if layout is None:
        parts = map_blocks_delayed(function, name, block_args, *common_args, reads_data=True, energy_of=energy_of)
        return tree_reduce(parts, combine, name, part_bytes=part_bytes)
    groups, levels = layout
    tasks = group_pass(
        run_group,
        function,
        name,
        groups,
        *common_args,
        combine=combine,
        levels=levels,
        n_blocks=len(block_args),
        energy_of=energy_of,
    )
    return tree_reduce(tasks, combine, name, part_bytes=part_bytes)


__all__ = [
    "BlockRead",
    "TreeAccumulator",
    "group_levels",
    "block_reads",
    "in_groups",
    "group_pass",
    "map_reduce_blocks",
    "run_group",
    "run_group_keeping_states",
    "revisit_group",
]
