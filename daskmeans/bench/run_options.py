"""The bench's options that name runs: ``--versus`` (a run every run is timed against) and ``--param`` (an
estimator parameter of a daskmeans algorithm), checked before any work."""

from __future__ import annotations

from ..cli.common import parse_param
from ..exceptions import InvalidParameterError
from ..registry import ALGORITHMS, estimator_class
from .peers import PEERS


def parse_versus(text, within=0.0) -> dict:
    """``"faiss-all@25"`` -> ``{"name": "faiss-all", "iteration": 25, "within": within}``; ``"faiss-all"`` -> its
    final energy. A run counts as having reached the reference energy once within ``within`` (relative) of it.

    Raises
    ------
    ValueError
        When the iteration is not a positive integer.
    """
    name, _, iteration = text.partition("@")
    if not iteration:
        return {"name": name, "iteration": None, "within": within}
    if not iteration.isdigit() or int(iteration) < 1:
        raise ValueError(f"the iteration after '@' must be a positive integer, e.g. faiss-all@25; got {text!r}")
    return {"name": name, "iteration": int(iteration), "within": within}


def check_versus(versus, algorithms, peers, within=0.0) -> tuple:
    """``--versus`` as specs (:func:`parse_versus`), each naming a run this bench makes (``algorithms`` and
    ``peers``: the names asked for, None for the defaults), reached once within ``within`` (``--versus-within``)."""
    if isinstance(within, bool) or not isinstance(within, (int, float)) or not 0 <= within < 1:
        raise InvalidParameterError(
            f"--versus-within must be a relative distance from 0 to below 1 (e.g. 1e-4), got {within!r}."
        )
    if within and not versus:
        raise InvalidParameterError(
            "--versus-within applies to the runs named by --versus; name one (e.g. --versus faiss-all@25)."
        )
    specs = []
    for text in versus or ():
        try:
            spec = parse_versus(text, float(within))
        except ValueError as error:
            raise InvalidParameterError(f"--versus: {error}.") from None
        known = list(ALGORITHMS) + list(PEERS)
        if spec["name"] not in known:
            raise InvalidParameterError(
                f"--versus names {spec['name']!r}, which is neither a daskmeans algorithm nor a peer; choose from "
                f"{', '.join(known)}, optionally with '@ITERATION' (e.g. faiss-all@25)."
            )
        if spec["iteration"] is not None and spec["name"] in PEERS and not PEERS[spec["name"]].iterates:
            raise InvalidParameterError(
                f"--versus {text}: {spec['name']} returns only its final centers, not numbered iterations; name it "
                f"without '@' (its final energy)."
            )
        asked = algorithms if spec["name"] in ALGORITHMS else peers
        if asked is not None and spec["name"] not in asked:
            option = "--algorithms" if spec["name"] in ALGORITHMS else "--peers"
            raise InvalidParameterError(
                f"--versus names {spec['name']!r}, which this bench does not run; add it to {option}."
            )
        specs.append(spec)
    return tuple(specs)


#: Estimator parameters every bench run sets itself (``--param`` may not). ``init`` may be set to a seeding method
#: by name (e.g. ``kmeans:init=two-level``): the run then seeds itself instead of starting from the shared centers.
BENCH_SETS = ("n_clusters", "max_time", "random_state", "client", "progress", "snapshot_centers")


def check_params(params, algorithms) -> dict:
    """``--param ALGORITHM:NAME=VALUE`` as ``{algorithm: {name: value}}``, each a parameter of that algorithm
    (``algorithms``: the names asked for, None for the defaults)."""
    chosen = {}
    for text in params or ():
        algorithm, sep, assignment = text.partition(":")
        if not sep or algorithm not in ALGORITHMS:
            raise InvalidParameterError(
                f"--param {text!r} is not ALGORITHM:NAME=VALUE with a daskmeans algorithm (e.g. --param kmeans:tol=0); "
                f"the algorithms are {', '.join(ALGORITHMS)}."
            )
        if algorithms is not None and algorithm not in algorithms:
            raise InvalidParameterError(
                f"--param {text!r}: this bench does not run {algorithm}; add it to --algorithms."
            )
        name, value = parse_param(assignment)
        accepted = estimator_class(algorithm)._get_param_names()
        if name in BENCH_SETS or name not in accepted:
            raise InvalidParameterError(
                f"--param {text!r}: {algorithm} has no parameter {name!r} that the bench leaves free; choose from "
                f"{', '.join(n for n in sorted(accepted) if n not in BENCH_SETS)}."
            )
        if name == "init" and not isinstance(value, str):
            raise InvalidParameterError(
                f"--param {text!r}: init may name a seeding method (e.g. two-level); the "
                "shared initial centers are the default."
            )
        chosen.setdefault(algorithm, {})[name] = value
    for algorithm, values in chosen.items():
        try:
            estimator_class(algorithm)(**values)._validate_params()
        except InvalidParameterError as error:
            raise InvalidParameterError(f"--param for {algorithm}: {error}") from None
    return chosen
