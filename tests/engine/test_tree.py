"""The tree nodes a set of blocks covers, and the root from the nodes of a partition: the fixed tree of
reduce_in_tree, whoever holds which blocks."""

from __future__ import annotations

import numpy as np
import pytest

from daskmeans import config
from daskmeans.engine.graph import reduce_in_tree
from daskmeans.engine.tree import root_of, subtree_nodes, tree_levels


def nested(parts):
    """A combine that keeps the tree's shape: two trees are the same exactly when their results are equal."""
    return tuple(parts)


@pytest.mark.parametrize("split_every", [2, 3, 8])
@pytest.mark.parametrize("n_parts", [1, 2, 7, 8, 9, 64, 65, 200])
def test_the_nodes_of_any_partition_give_the_tree_of_every_part(split_every, n_parts):
    rng = np.random.default_rng(n_parts * split_every)
    with config.set(SPLIT_EVERY=split_every):
        whole = reduce_in_tree(list(range(n_parts)), nested)
    assert tree_levels(n_parts, split_every) == len(repr(whole)) - len(repr(whole).lstrip("("))
    for owners in (rng.integers(0, 3, n_parts), np.arange(n_parts) * 3 // n_parts, np.zeros(n_parts, int)):
        nodes = []
        for owner in range(3):
            indices = [int(i) for i in np.flatnonzero(owners == owner)]
            nodes += subtree_nodes(indices, indices, n_parts, nested, split_every)
        assert root_of(nodes, n_parts, nested, split_every) == whole


@pytest.mark.parametrize("start, stop", [(0, 8), (0, 64), (0, 32), (5, 190), (64, 128)])
def test_a_run_of_consecutive_parts_is_a_few_nodes_per_level(start, stop):
    indices = list(range(start, stop))
    nodes = subtree_nodes(indices, indices, 200, nested, 8)
    levels = tree_levels(200, 8)
    assert len(nodes) <= 2 * 7 * levels
    if start % 64 == 0 and stop - start == 64:
        assert [key for key, _ in nodes] == [(2, start // 64)], "a whole subtree is one node"
