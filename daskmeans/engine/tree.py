"""The nodes of the fixed reduction tree that a set of blocks covers, and the tree's root from such nodes.

:func:`~daskmeans.engine.graph.reduce_in_tree` combines ``SPLIT_EVERY`` consecutive partial results into one of the
next level until one is left. A task that holds some of the blocks (those one worker holds) can combine every
node whose blocks it all holds, exactly as the tree would, and hand over those few nodes instead of one partial
result per block (:func:`subtree_nodes`); whoever gathers the nodes of every block finishes the same tree
(:func:`root_of`), so the value is the same to the last bit whoever held which blocks.
"""

from __future__ import annotations


def tree_levels(n_parts: int, split_every: int) -> int:
    """The levels of combines :func:`~daskmeans.engine.graph.reduce_in_tree` makes over ``n_parts`` parts (at
    least one).

    Examples
    --------
    >>> tree_levels(1, 8), tree_levels(8, 8), tree_levels(9, 8), tree_levels(64, 8)
    (1, 1, 2, 2)
    """
    levels, count = 1, -(-n_parts // split_every)
    while count > 1:
        count, levels = -(-count // split_every), levels + 1
    return levels


def _combine_complete(nodes: dict, n_parts: int, combine, split_every: int) -> dict:
    """Combine, level by level, every node all of whose children are in ``nodes`` (a dict ``{(level, index):
    value}``, changed in place)."""
    for level in range(tree_levels(n_parts, split_every)):
        count = -(-n_parts // split_every**level)
        for parent in sorted({index // split_every for lv, index in nodes if lv == level}):
            children = range(parent * split_every, min((parent + 1) * split_every, count))
            if all((level, child) in nodes for child in children):
                nodes[level + 1, parent] = combine([nodes.pop((level, child)) for child in children])
    return nodes


def subtree_nodes(indices, values, n_parts: int, combine, split_every: int) -> list:
    """The largest nodes of the tree over ``n_parts`` parts whose parts are all among ``indices`` (their values
    ``values``), each combined as the tree combines it: ``[((level, index), value), ...]`` in order.

    Examples
    --------
    >>> subtree_nodes([0, 1, 2, 3, 5], list("abcdf"), 6, "".join, 2)
    [((2, 0), 'abcd'), ((0, 5), 'f')]
    """
    nodes = {(0, int(i)): value for i, value in zip(indices, values)}
    return sorted(_combine_complete(nodes, n_parts, combine, split_every).items(), key=lambda item: item[0][::-1])


def root_of(nodes, n_parts: int, combine, split_every: int):
    """The tree's root from ``nodes`` (pairs ``((level, index), value)`` that together cover every part once, as
    :func:`subtree_nodes` of a partition of the parts gives them).

    Examples
    --------
    >>> root_of([((2, 0), "abcd"), ((0, 4), "e"), ((0, 5), "f")], 6, "".join, 2)
    'abcdef'
    """
    nodes = _combine_complete(dict(nodes), n_parts, combine, split_every)
    return nodes[tree_levels(n_parts, split_every), 0]


__all__ = ["tree_levels", "subtree_nodes", "root_of"]
