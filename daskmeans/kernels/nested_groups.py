"""Groups of centers for the bounds of nested mini-batch k-means: Elkan, yinyang, Hamerly, or none.

Bounds are kept per *group* of centers: a lower bound on the distance from a sample to every center of the
group except the sample's own. One group per center is Elkan's scheme (k bounds per sample), one group of
all centers is Hamerly's (one bound), a few groups of nearby centers is yinyang (Ding et al. 2015). After the
centers move by ``p`` (per center), a group's bound drops by the largest ``p`` in the group. The kernels that
use the bounds are in :mod:`daskmeans.kernels.nested`.
"""

from __future__ import annotations

import numpy as np

from .. import config
from .packed_bounds import LOWER_BYTES

#: Bound schemes accepted by ``bounds=``.
BOUND_SCHEMES = ("auto", "elkan", "yinyang", "hamerly", "none")


class CenterGroups:
    """A partition of the centers into groups that share one lower bound per sample.

    Attributes
    ----------
    group_of : int32 (k,)
    ptr, members : int64 (n_groups + 1,), int32 (k,)
        Centers of group ``g`` are ``members[ptr[g]:ptr[g + 1]]``, in increasing order.
    slot_center : int32 (n_groups * width,)
        The centers slot by slot: entry ``t * n_groups + g`` is the ``t``-th center of group ``g``, or -1 where
        the group has fewer than ``width`` centers.
    scheme : str
        ``"elkan"``, ``"yinyang"``, ``"hamerly"`` or ``"none"``.
    """

    def __init__(self, group_of, scheme):
        group_of = np.asarray(group_of, dtype=np.int32)
        self.scheme = scheme
        self.group_of = group_of
        self.n_groups = int(group_of.max()) + 1 if group_of.size else 1
        order = np.argsort(group_of, kind="stable")
        self.members = order.astype(np.int32)
        sizes = np.bincount(group_of, minlength=self.n_groups)
        self.ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        width = int(sizes.max())
        slots = np.full((width, self.n_groups), -1, dtype=np.int32)
        for g in range(self.n_groups):
            slots[: sizes[g], g] = self.members[self.ptr[g] : self.ptr[g + 1]]
        self.slot_center = slots.ravel()

    def group_shift(self, shift):
        """Largest move of a center in each group (how much the group's bounds drop)."""
        out = np.zeros(self.n_groups, dtype=np.float64)
        np.maximum.at(out, self.group_of, np.asarray(shift, dtype=np.float64))
        return out

    def __dask_tokenize__(self):
        return ("daskmeans-center-groups", self.scheme, self.group_of.tobytes())


def choose_bounds(bounds, n_clusters, row_bytes):
    """Resolve ``bounds="auto"`` and return ``(scheme, n_groups)``.

    Yinyang takes groups of about :data:`~daskmeans.config.YINYANG_GROUP_SIZE` centers, and at least
    :data:`~daskmeans.config.YINYANG_MIN_GROUPS` groups where that leaves
    :data:`~daskmeans.config.YINYANG_MIN_GROUP_SIZE` centers or more a group: smaller groups where ``k`` is a few
    hundred, whose bounds skip more rows. ``"auto"`` takes those groups, as many as fit the row they belong to at 16
    bits a bound (:data:`~daskmeans.kernels.packed_bounds.LOWER_BYTES`, so the batch's memory stays O(batch x d)),
    else Hamerly's single bound. It never takes Elkan's bound per center: at small ``k`` they skip a few more
    distances than groups of 8, but every revisit reads and writes all of them, which costs more.

    Examples
    --------
    >>> choose_bounds("auto", 1000, 512)  # 128 float32 features: groups of 10 centers
    ('yinyang', 100)
    >>> choose_bounds("auto", 256, 512)  # at least YINYANG_MIN_GROUPS groups
    ('yinyang', 32)
    >>> choose_bounds("auto", 64, 512)  # groups of at least YINYANG_MIN_GROUP_SIZE centers
    ('yinyang', 8)
    >>> choose_bounds("auto", 4096, 512)  # 410 groups of 10 would not fit: 256 groups of 16 bits, of 16 centers
    ('yinyang', 256)
    >>> choose_bounds("elkan", 64, 512)
    ('elkan', 64)
    """
    if bounds == "none":
        return "none", 1
    if bounds == "hamerly" or n_clusters == 1:
        return "hamerly", 1
    if bounds == "elkan":
        return "elkan", n_clusters
    yinyang_groups = max(
        1,
        -(-n_clusters // config.YINYANG_GROUP_SIZE),
        min(config.YINYANG_MIN_GROUPS, n_clusters // config.YINYANG_MIN_GROUP_SIZE),
    )
    if bounds == "yinyang":
        return ("yinyang", yinyang_groups) if yinyang_groups > 1 else ("hamerly", 1)
    n_groups = min(yinyang_groups, max(1, row_bytes // LOWER_BYTES))
    return ("yinyang", n_groups) if n_groups > 1 else ("hamerly", 1)


#: Most power iterations :func:`principal_axis` takes (it stops sooner once the direction settles).
AXIS_MAX_ITERATIONS = 50
#: :func:`principal_axis` stops once no component of the unit direction moves more than this in a step.
AXIS_TOLERANCE = 1e-4


def principal_axis(centered):
    """Unit direction of largest variance of the rows of ``centered`` (mean zero), its largest component positive.

    With fewer rows than features, exactly: from the top eigenvector ``u`` of the small Gram matrix of the rows
    (``centered^T u`` is the scatter matrix's). Otherwise by power iteration on the scatter matrix, two
    matrix-vector products a step (never the ``d x d`` matrix), from the row farthest from the mean, until the
    direction settles (:data:`AXIS_TOLERANCE`, at most :data:`AXIS_MAX_ITERATIONS` steps). Both cost a small
    fraction of an eigendecomposition of the scatter matrix or an SVD of the rows, for the hundreds of splits of
    :func:`make_groups` at ``k`` in the thousands. Where the largest variances are close, the iteration converges
    slowly and may stop at a direction of a little less variance (1% less in the tests), which splits the centers
    about as well; any split keeps the bounds exact.

    Examples
    --------
    >>> points = np.array([[-3.0, 1.0], [-3.0, -1.0], [3.0, 1.0], [3.0, -1.0]])  # variance 9 along x, 1 along y
    >>> np.abs(np.round(principal_axis(points), 4))
    array([1., 0.])
    """
    centered = np.asarray(centered, dtype=np.float64)
    norms = np.einsum("ij,ij->i", centered, centered)
    if centered.shape[0] == 0 or norms.max() == 0.0:
        direction = np.zeros(centered.shape[1])
        direction[0] = 1.0
        return direction
    if centered.shape[0] < centered.shape[1]:
        direction = centered.T @ np.linalg.eigh(centered @ centered.T)[1][:, -1]
        direction /= np.linalg.norm(direction)
    else:
        direction = _power_iteration(centered, centered[np.argmax(norms)] / np.sqrt(norms.max()))
    return direction if direction[np.argmax(np.abs(direction))] >= 0 else -direction


def _power_iteration(centered, direction):
    """The top eigenvector of ``centered^T centered`` by power iteration from the unit vector ``direction``."""
    for _ in range(AXIS_MAX_ITERATIONS):
        step = centered.T @ (centered @ direction)
        step /= np.linalg.norm(step)
        settled = np.abs(step - direction).max() < AXIS_TOLERANCE
        direction = step
        if settled:
            break
    return direction


def _bisect(points, index, n_groups, group_of, next_group):
    """Split ``index`` into ``n_groups`` groups of nearly equal size by halving along the principal axis."""
    if n_groups == 1:
        group_of[index] = next_group
        return next_group + 1
    part = points[index]
    centered = part - part.mean(axis=0)
    direction = principal_axis(centered)
    order = np.argsort(centered @ direction, kind="stable")
    first = n_groups // 2
    cut = int(round(len(index) * first / n_groups))
    next_group = _bisect(points, index[order[:cut]], first, group_of, next_group)
    return _bisect(points, index[order[cut:]], n_groups - first, group_of, next_group)


def make_groups(centers, scheme, n_groups):
    """Group the centers for ``scheme``.

    Yinyang groups are nearby centers in groups of equal size (at most one apart), by recursive halving of
    the centers along their principal axis: equal sizes keep the slot layout of :func:`assign_with_bounds`
    free of padding, nearby centers keep each group's bound tight.

    Parameters
    ----------
    centers : ndarray (k, d)
    scheme : str
    n_groups : int
    """
    k = centers.shape[0]
    if scheme == "elkan":
        return CenterGroups(np.arange(k), scheme)
    n_groups = min(int(n_groups), k)
    if scheme in ("hamerly", "none") or n_groups <= 1:
        return CenterGroups(np.zeros(k, dtype=np.int32), scheme)
    group_of = np.empty(k, dtype=np.int32)
    _bisect(np.asarray(centers, dtype=np.float64), np.arange(k), n_groups, group_of, 0)
    return CenterGroups(group_of, scheme)
