"""Kernel functions for kernel k-means: RBF, Laplacian, polynomial and a user callable, as kernel matrices.

A kernel block is built from one GEMM: the RBF kernel's squared distances are ``||x||^2 + ||y||^2 - 2 <x, y>``
(the dot products one GEMM, the squared norms accumulated in float64), turned into kernel values by one fused
Numba pass and one vectorized ``exp``; the polynomial kernel is the same GEMM and one element-wise pass. The
Laplacian kernel (an L1 distance, no GEMM form) is a Numba loop accumulating in float64.

Precision: when both inputs are float32 the GEMM runs in float32 (about 1e-7 relative error in the dot products,
twice the speed of float64; an RBF exponent is then off by a few ``1e-7 (||x||^2 + ||y||^2) / kappa`` at most),
and the RBF and Laplacian kernels, whose values lie in (0, 1], return float32
blocks (half the memory traffic downstream; every sum over them accumulates in float64). The polynomial kernel
(unbounded values) and a callable always return float64; float64 inputs give float64 blocks.

Kernels (``kernel=`` and its ``kernel_params``):

- ``"rbf"``: ``exp(-||x - y||^2 / kappa)``; parameter ``kappa`` (> 0 or ``"auto"``).
- ``"laplacian"``: ``exp(-||x - y||_1 / kappa)``; parameter ``kappa`` (> 0 or ``"auto"``).
- ``"polynomial"``: ``(gamma <x, y> + coef0) ** degree``; parameters ``degree`` (int >= 1, default 3),
  ``gamma`` (> 0, default ``1 / n_features``), ``coef0`` (>= 0, default 1).
- a callable ``f(X, Y, **kernel_params) -> (len(X), len(Y))`` array: any positive semi-definite kernel.

``kappa="auto"`` (the default) is data-driven: the mean, over random pairs of rows of the seeding sample, of
the distance in the exponent (``||x - y||^2`` for RBF, ``||x - y||_1`` for Laplacian), so that a random pair
has a kernel value of about ``exp(-1)``. For RBF this estimates ``2 * sum of the feature variances``; it is the
average-distance bandwidth rule of Wang, Gittens & Mahoney (2019), which the mini-batch kernel k-means paper
starts from before tuning by hand. Clusters much smaller than the data's spread (concentric circles, MNIST
digits) often want a smaller ``kappa``: pass a number.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numba
import numpy as np

from ..exceptions import InvalidParameterError
from .score_error import row_sq_norms

#: Kernels known by name.
KERNEL_NAMES = ("rbf", "laplacian", "polynomial")
#: Parameters each named kernel accepts.
KERNEL_PARAMETERS = {"rbf": ("kappa",), "laplacian": ("kappa",), "polynomial": ("degree", "gamma", "coef0")}


def squared_norms(X):
    """``||x||^2`` of every row, accumulated in float64 (float64 ``(m,)``), for float32 or float64 rows: the fixed
    order of :func:`daskmeans.kernels.distance.pair_dist2` (eight vector lanes), the same value on every machine."""
    return row_sq_norms(X)


@numba.njit(cache=True, nogil=True)
def rbf_exponent(gram, x_sq, y_sq, inv_kappa):
    """Turn a Gram matrix ``<x, y>`` into ``-||x - y||^2 / kappa`` in place (distances clipped at 0).

    The distance is formed in float64 (``gram`` may be float32: it keeps its dtype)."""
    m, n = gram.shape
    for i in range(m):
        for j in range(n):
            d2 = x_sq[i] + y_sq[j] - 2.0 * gram[i, j]
            if d2 < 0.0:
                d2 = 0.0
            gram[i, j] = -d2 * inv_kappa
    return gram


def symmetric_product_pays(n_rows, n_features) -> bool:
    """Whether ``X @ X.T`` for ``X`` of this shape is cheaper as the symmetric rank-k update NumPy makes of it
    than as a general product of ``X`` and a copy.

    The update computes half the values, but OpenBLAS runs it several times slower per value than the general
    product when the rows are short, and faster when they are long. The rule: rows at least as long as they are
    many.
    """
    return n_features >= n_rows


def rbf_from_gram(gram, x_sq, y_sq, inv_kappa):
    """Turn a Gram matrix ``<x, y>`` into ``exp(-||x - y||^2 / kappa)`` in place (distances clipped at 0).

    The exponentials are NumPy's vectorized ``exp`` (several times faster than a scalar loop).

    Parameters
    ----------
    gram : float32 or float64 (m, n)
        Overwritten with the kernel values (same dtype).
    x_sq, y_sq : float64 (m,), (n,)
        Squared norms of the rows.
    inv_kappa : float
    """
    return np.exp(rbf_exponent(gram, x_sq, y_sq, inv_kappa), out=gram)


@numba.njit(cache=True, nogil=True)
def laplacian_exponent(X, Y, inv_kappa):
    """``-||x - y||_1 / kappa`` for every pair of rows, accumulated in float64, stored in the rows' dtype."""
    m, d = X.shape
    n = Y.shape[0]
    out = np.empty((m, n), dtype=X.dtype)
    for i in range(m):
        for j in range(n):
            s = 0.0
            for f in range(d):
                s += abs(np.float64(X[i, f]) - np.float64(Y[j, f]))
            out[i, j] = -s * inv_kappa
    return out


def laplacian_matrix(X, Y, inv_kappa):
    """``exp(-||x - y||_1 / kappa)`` for every pair of rows, accumulated in float64.

    Parameters
    ----------
    X : ndarray (m, d), float32 or float64
    Y : ndarray (n, d), same dtype
    inv_kappa : float

    Returns
    -------
    ndarray (m, n)
        In the dtype of the rows.
    """
    out = laplacian_exponent(X, Y, inv_kappa)
    return np.exp(out, out=out)


@numba.njit(cache=True, nogil=True)
def polynomial_from_gram(gram, gamma, coef0, degree):
    """Turn a Gram matrix into ``(gamma <x, y> + coef0) ** degree`` in place."""
    m, n = gram.shape
    for i in range(m):
        for j in range(n):
            gram[i, j] = (gamma * gram[i, j] + coef0) ** degree
    return gram


def _as_float64(X):
    return np.ascontiguousarray(X, dtype=np.float64)


def _check_kappa(value, name):
    if isinstance(value, str) and value == "auto":
        return value
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, numbers.Real)
        or not np.isfinite(value)
        or value <= 0
    ):
        raise InvalidParameterError(
            f"kernel_params['kappa'] of the {name} kernel must be a finite number > 0 or 'auto' (the mean "
            f"pairwise distance of a sample); got {value!r}."
        )
    return float(value)


@dataclass(frozen=True)
class Kernel:
    """A kernel with its parameters resolved.

    Attributes
    ----------
    name : str
        ``"rbf"``, ``"laplacian"``, ``"polynomial"`` or ``"callable"``.
    params : dict
        Numeric parameters (``kappa`` resolved from ``"auto"``); for a callable, the keyword arguments it gets.
    function : callable or None
        The user's function (``name="callable"``).
    """

    name: str
    params: dict = field(default_factory=dict)
    function: object = None

    @property
    def normalized(self) -> bool:
        """``K(x, x) = 1`` for every x (then ``gamma = max ||phi(x)|| = 1``)."""
        return self.name in ("rbf", "laplacian")

    def row_norms(self, X):
        """What :meth:`matrix` may be given for the rows ``X`` (``x_sq``/``y_sq``): their squared norms for RBF
        (float64), None for the other kernels, which do not use them."""
        return squared_norms(np.ascontiguousarray(X)) if self.name == "rbf" else None

    def matrix(self, X, Y, *, x_sq=None, y_sq=None) -> np.ndarray:
        """``K(X[i], Y[j])`` for every pair of rows, ``(len(X), len(Y))``.

        float32 for the RBF and Laplacian kernels when both inputs are float32, float64 otherwise (see the
        module's notes on precision). ``x_sq``, ``y_sq``: the rows' :meth:`row_norms` when the caller keeps them
        (the result is the same; they are computed when None).
        """
        if self.name == "callable":
            return self._call(X, Y)
        single = X.dtype == np.float32 and Y.dtype == np.float32
        out_dtype = np.float32 if single and self.name != "polynomial" else np.float64
        if X.shape[0] == 0 or Y.shape[0] == 0:
            return np.zeros((X.shape[0], Y.shape[0]), dtype=out_dtype)
        if self.name == "laplacian":
            dtype = np.float32 if single else np.float64
            return laplacian_matrix(
                np.ascontiguousarray(X, dtype=dtype), np.ascontiguousarray(Y, dtype=dtype), 1.0 / self.params["kappa"]
            )
        if single:
            X, Y = np.ascontiguousarray(X), np.ascontiguousarray(Y)
        else:
            X, Y = _as_float64(X), _as_float64(Y)
        if X.ctypes.data == Y.ctypes.data and X.shape == Y.shape and not symmetric_product_pays(*X.shape):
            Y = Y.copy()  # the general product
        gram = X @ Y.T
        if self.name == "rbf":
            return rbf_from_gram(
                gram,
                squared_norms(X) if x_sq is None else x_sq,
                squared_norms(Y) if y_sq is None else y_sq,
                1.0 / self.params["kappa"],
            )
        return polynomial_from_gram(
            gram.astype(np.float64, copy=False), self.params["gamma"], self.params["coef0"], self.params["degree"]
        )

    def diag(self, X) -> np.ndarray:
        """``K(x, x)`` for every row, float64 ``(len(X),)``."""
        if self.normalized:
            return np.ones(X.shape[0])
        if self.name == "polynomial":
            X64 = _as_float64(X)
            return (self.params["gamma"] * np.einsum("ij,ij->i", X64, X64) + self.params["coef0"]) ** self.params[
                "degree"
            ]
        out = np.empty(X.shape[0])
        for start in range(0, X.shape[0], 256):
            block = X[start : start + 256]
            out[start : start + 256] = np.diagonal(self._call(block, block))
        return out

    def _call(self, X, Y):
        value = np.asarray(self.function(X, Y, **self.params), dtype=np.float64)
        if value.shape != (X.shape[0], Y.shape[0]):
            raise InvalidParameterError(
                f"The kernel callable returned an array of shape {value.shape} for inputs of {X.shape[0]} and "
                f"{Y.shape[0]} rows; it must return the ({X.shape[0]}, {Y.shape[0]}) matrix K(X[i], Y[j])."
            )
        if not np.isfinite(value).all():
            raise InvalidParameterError("The kernel callable returned NaN or infinity; it must return finite values.")
        return value


def check_kernel(kernel, kernel_params):
    """Validate ``kernel`` and ``kernel_params`` without data (names, types, ranges).

    Raises
    ------
    InvalidParameterError
        Unknown kernel name, unknown parameter, or a value out of range.
    """
    if kernel_params is not None and not isinstance(kernel_params, dict):
        raise InvalidParameterError(f"kernel_params must be a dict or None, got {type(kernel_params).__name__}.")
    params = dict(kernel_params or {})
    if callable(kernel):
        return
    if not isinstance(kernel, str) or kernel not in KERNEL_NAMES:
        raise InvalidParameterError(
            f"kernel must be one of {', '.join(repr(n) for n in KERNEL_NAMES)} or a callable f(X, Y) returning the "
            f"kernel matrix; got {kernel!r}."
        )
    unknown = sorted(set(params) - set(KERNEL_PARAMETERS[kernel]))
    if unknown:
        raise InvalidParameterError(
            f"kernel_params {unknown} do not apply to the {kernel} kernel; it takes {list(KERNEL_PARAMETERS[kernel])}."
        )
    if kernel in ("rbf", "laplacian"):
        _check_kappa(params.get("kappa", "auto"), kernel)
    else:
        degree = params.get("degree", 3)
        if isinstance(degree, (bool, np.bool_)) or not isinstance(degree, numbers.Integral) or degree < 1:
            raise InvalidParameterError(f"kernel_params['degree'] must be an integer >= 1, got {degree!r}.")
        gamma = params.get("gamma")
        if gamma is not None and (
            isinstance(gamma, (bool, np.bool_))
            or not isinstance(gamma, numbers.Real)
            or not np.isfinite(gamma)
            or gamma <= 0
        ):
            raise InvalidParameterError(f"kernel_params['gamma'] must be a number > 0 (or None), got {gamma!r}.")
        coef0 = params.get("coef0", 1.0)
        if (
            isinstance(coef0, (bool, np.bool_))
            or not isinstance(coef0, numbers.Real)
            or not np.isfinite(coef0)
            or coef0 < 0
        ):
            raise InvalidParameterError(f"kernel_params['coef0'] must be a number >= 0, got {coef0!r}.")


def auto_kappa(name, sample, rng) -> float:
    """The default ``kappa``: mean distance in the exponent over random pairs of ``sample`` rows.

    Parameters
    ----------
    name : {"rbf", "laplacian"}
    sample : ndarray (m, d)
    rng : numpy.random.Generator
        Draws the pairing (each row against a random other row).
    """
    sample = _as_float64(sample)
    m = sample.shape[0]
    if m < 2:
        return 1.0
    partner = (np.arange(m) + rng.integers(1, m, size=m)) % m
    diff = sample - sample[partner]
    distance = np.einsum("ij,ij->i", diff, diff) if name == "rbf" else np.abs(diff).sum(axis=1)
    value = float(distance.mean())
    return value if value > 0 else 1.0


def resolve_kernel(kernel, kernel_params, n_features, sample=None, rng=None) -> Kernel:
    """The :class:`Kernel` for ``kernel`` and ``kernel_params``, with defaults filled in.

    Parameters
    ----------
    kernel : str or callable
    kernel_params : dict or None
    n_features : int
    sample : ndarray (m, d), optional
        Rows for ``kappa="auto"``.
    rng : numpy.random.Generator, optional
        Pairs the sample rows for ``kappa="auto"``.
    """
    check_kernel(kernel, kernel_params)
    params = dict(kernel_params or {})
    if callable(kernel):
        return Kernel("callable", params, kernel)
    if kernel in ("rbf", "laplacian"):
        kappa = params.get("kappa", "auto")
        if kappa == "auto":
            if sample is None:
                raise InvalidParameterError("kappa='auto' needs a sample of the data to measure the pairwise distance.")
            kappa = auto_kappa(kernel, sample, rng if rng is not None else np.random.default_rng(0))
        return Kernel(kernel, {"kappa": float(kappa)})
    gamma = params.get("gamma")
    return Kernel(
        "polynomial",
        {
            "degree": int(params.get("degree", 3)),
            "gamma": float(gamma) if gamma is not None else 1.0 / max(1, n_features),
            "coef0": float(params.get("coef0", 1.0)),
        },
    )
