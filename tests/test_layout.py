"""The package's architecture, checked from its imports (read with ``ast``, nothing imported).

- no import circle between daskmeans' modules, counting the imports inside functions too (so no import is moved
  into a function to hide a circle);
- no import of a daskmeans module inside a function, except in the command line (``daskmeans.cli``), whose
  commands import what they need when they run so that ``--help`` and ``info`` start at once; lazy imports of
  optional third-party packages are fine everywhere;
- the layers point one way: kernels/ import only kernels/, exceptions and config; passes/ never import
  algorithms/ or estimators/; algorithms/ never import estimators/; storage/ never imports estimators/ (models are
  loaded through the registry); nothing outside bench/ imports bench/;
- no module over 600 lines as ruff formats them (about 500 lines of code wrapped by hand);
- no function of algorithms/ or estimators/ over :data:`MAX_PARAMETERS` parameters (estimators' ``__init__`` and
  Numba kernels exempt): what a fit decided travels as one plan, what its iterations carry as one state object;
- every Numba kernel of more than :data:`MAX_UNMARKED_KERNEL_ARGUMENTS` arguments marks each one IN, OUT or IN-OUT.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "daskmeans"
MAX_LINES = 600

#: (importing folder, imported folder or module) pairs that must not occur
FORBIDDEN = [
    ("passes", "algorithms"),
    ("passes", "estimators"),
    ("algorithms", "estimators"),
    ("storage", "estimators"),
]
#: what a kernel module may import from daskmeans besides other kernels
KERNEL_MAY_IMPORT = {"daskmeans.exceptions", "daskmeans.config"}
#: packages whose functions may import daskmeans modules (for start-up time, never to hide a circle)
LAZY_IMPORTS_ALLOWED = ("daskmeans.cli",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def resolve(module: str, path: Path, node: ast.ImportFrom) -> list[str]:
    """The daskmeans modules an ``ImportFrom`` node imports (a name that is a submodule counts as that module)."""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if not base.startswith("daskmeans"):
        return []
    targets = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        targets.append(submodule if submodule in MODULES else base)
    return targets


def imports_of(module: str, path: Path):
    """``(imported module, line, inside a function)`` for every daskmeans import of ``module``."""
    tree = ast.parse(path.read_text())
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                continue  # never run: imports for type checkers only
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                found.extend((target, child.lineno, in_function) for target in resolve(module, path, child))
            elif isinstance(child, ast.Import):
                found.extend(
                    (alias.name, child.lineno, in_function)
                    for alias in child.names
                    if alias.name.startswith("daskmeans")
                )
            visit(child, nested)

    visit(tree, False)
    return found


IMPORTS = {module: imports_of(module, path) for module, path in MODULES.items()}


def graph() -> dict[str, set[str]]:
    edges = {module: set() for module in MODULES}
    for module, found in IMPORTS.items():
        for target, _, _ in found:
            if target != module and target in MODULES:
                edges[module].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), plus modules importing themselves."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def connect(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def folder(module: str) -> str:
    """The first level under daskmeans: ``daskmeans.passes.assign`` -> ``passes``; top-level modules by name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_checker_sees_the_package():
    edges = graph()
    assert "daskmeans.estimators.kmeans" in edges and "daskmeans.kernels.assign" in edges
    assert "daskmeans.algorithms.lloyd" in edges["daskmeans.estimators.kmeans"]


def test_the_circle_finder_finds_circles():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    found = circles(graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_daskmeans_import_inside_a_function():
    hidden = [
        f"{module}:{line} imports {target}"
        for module, found in IMPORTS.items()
        if not module.startswith(LAZY_IMPORTS_ALLOWED)
        for target, line, in_function in found
        if in_function
    ]
    assert not hidden, "imports inside functions: " + "; ".join(hidden)


@pytest.mark.parametrize("importer, imported", FORBIDDEN)
def test_layers_point_one_way(importer, imported):
    wrong = [
        f"{module} imports {target}"
        for module, found in IMPORTS.items()
        if folder(module) == importer
        for target, _, _ in found
        if folder(target) == imported
    ]
    assert not wrong, wrong


def test_kernels_import_only_kernels_exceptions_and_config():
    wrong = [
        f"{module} imports {target}"
        for module, found in IMPORTS.items()
        if folder(module) == "kernels"
        for target, _, _ in found
        if folder(target) != "kernels" and target not in KERNEL_MAY_IMPORT
    ]
    assert not wrong, wrong


def test_only_bench_imports_bench():
    wrong = [
        f"{module} imports {target}"
        for module, found in IMPORTS.items()
        if folder(module) != "bench"
        for target, _, _ in found
        if folder(target) == "bench"
    ]
    assert not wrong, wrong


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_size(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines; split it (at most about {MAX_LINES})"


# -- few parameters in the algorithms and the estimators ------------------------------------------------------------
#: Most parameters a function of ``algorithms/`` or ``estimators/`` takes (those a caller passes: ``self`` and
#: ``cls`` not counted); an estimator's ``__init__`` (its scikit-learn parameters) and Numba kernels are exempt.
MAX_PARAMETERS = 8
#: Functions still over the limit, each to be brought under it (the list only shrinks).
OVER_THE_LIMIT: set = set()


def parameter_counts() -> dict[str, int]:
    """``{"folder.module.function": parameters}`` for every function of algorithms/ and estimators/ over the limit
    (methods by their function name; ``self``/``cls`` not counted; ``*args`` and ``**kwargs`` one each)."""
    over = {}
    for module, path in MODULES.items():
        if folder(module) not in ("algorithms", "estimators"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                or node.name == "__init__"
                and folder(module) == "estimators"
            ):
                continue
            if any(
                "njit" in ast.unparse(d) or "jit" == ast.unparse(d).split("(")[0].split(".")[-1]
                for d in node.decorator_list
            ):
                continue
            args = node.args
            names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
            if names and names[0] in ("self", "cls"):
                names = names[1:]
            count = len(names) + (args.vararg is not None) + (args.kwarg is not None)
            if count > MAX_PARAMETERS:
                over[f"{module.removeprefix('daskmeans.')}.{node.name}"] = count
    return over


def test_functions_take_few_parameters():
    over = parameter_counts()
    new = {name: count for name, count in over.items() if name not in OVER_THE_LIMIT}
    assert not new, f"more than {MAX_PARAMETERS} parameters (group them: a plan, a state object): {new}"
    fixed = OVER_THE_LIMIT - set(over)
    assert not fixed, f"now within the limit, take them off OVER_THE_LIMIT: {sorted(fixed)}"


# -- kernels say what they read and write ---------------------------------------------------------------------------

#: Numba kernels with more arguments than this mark each one IN, OUT or IN-OUT in their docstring's Parameters
MAX_UNMARKED_KERNEL_ARGUMENTS = 6
#: a Parameters entry that marks its arguments: ``name : IN ...`` or ``name, other : IN-OUT ...``
MARKED_ARGUMENTS = re.compile(r"^(?P<names>\w+(?:, \w+)*) : (?P<role>IN-OUT|IN|OUT)\b", re.MULTILINE)


def unmarked_kernel_arguments() -> dict[str, list[str]]:
    """``{"kernels.module.function": [arguments]}``: the arguments that a Numba kernel of more than
    ``MAX_UNMARKED_KERNEL_ARGUMENTS`` arguments does not mark IN, OUT or IN-OUT (as scikit-learn's Cython kernels
    comment theirs ``# IN`` / ``# OUT``)."""
    unmarked = {}
    for module, path in MODULES.items():
        if folder(module) != "kernels":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef) or not any(
                "jit" in ast.unparse(d).split("(")[0] for d in node.decorator_list
            ):
                continue
            names = [a.arg for a in node.args.args]
            if len(names) <= MAX_UNMARKED_KERNEL_ARGUMENTS:
                continue
            doc = ast.get_docstring(node) or ""
            parameters = doc.partition("Parameters\n----------\n")[2]
            parameters = re.split(r"\n\n\w[\w ]*\n-+\n", parameters)[0]  # up to the next section
            marked = {
                name for match in MARKED_ARGUMENTS.finditer(parameters) for name in match.group("names").split(", ")
            }
            missing = [name for name in names if name not in marked]
            if missing:
                unmarked[f"{module.removeprefix('daskmeans.')}.{node.name}"] = missing
    return unmarked


def test_kernels_say_which_arguments_they_read_and_write():
    unmarked = unmarked_kernel_arguments()
    assert not unmarked, f"mark each argument IN, OUT or IN-OUT in the kernel's Parameters: {unmarked}"
