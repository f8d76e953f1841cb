"""Every public name teaches by example: its docstring has an Examples section that runs as a doctest, and the
estimators that implement a paper cite it (References) and point to their siblings (See Also)."""

from __future__ import annotations

import doctest
import inspect
import re

import pytest

import daskmeans

#: Every public name but the version string.
PUBLIC = [name for name in daskmeans.__all__ if name != "__version__"]

#: Names that implement a paper: each must cite one by DOI or arXiv id.
IMPLEMENTS_A_PAPER = (
    "KMeans",
    "MiniBatchKMeans",
    "NestedMiniBatchKMeans",
    "VRKMeans",
    "CoresetGaussianMixture",
    "MiniBatchKernelKMeans",
    "KernelKMeans",
    "lightweight_coreset",
)

#: Siblings each name's See Also section must name (at least these).
SIBLINGS = {
    "KMeans": ("MiniBatchKMeans", "NestedMiniBatchKMeans", "VRKMeans"),
    "MiniBatchKMeans": ("KMeans", "NestedMiniBatchKMeans", "VRKMeans"),
    "NestedMiniBatchKMeans": ("KMeans", "MiniBatchKMeans", "VRKMeans"),
    "VRKMeans": ("KMeans", "MiniBatchKMeans", "NestedMiniBatchKMeans"),
    "MiniBatchKernelKMeans": ("KernelKMeans",),
    "KernelKMeans": ("MiniBatchKernelKMeans",),
    "CoresetGaussianMixture": ("lightweight_coreset",),
    "lightweight_coreset": ("CoresetGaussianMixture",),
    "open_input": ("write_labels",),
    "write_labels": ("open_input",),
}

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def sections(obj) -> dict[str, str]:
    """The numpydoc sections of ``obj``'s docstring: heading -> text (the summary under ``""``)."""
    lines = inspect.cleandoc(obj.__doc__ or "").splitlines()
    found, heading = {"": []}, ""
    for index, line in enumerate(lines):
        underline = lines[index + 1] if index + 1 < len(lines) else ""
        if line.strip() and re.fullmatch(r"-{3,}", underline.strip()) and len(underline.strip()) == len(line.strip()):
            heading = line.strip()
            found[heading] = []
        elif not re.fullmatch(r"-{3,}", line.strip()) or heading == "":
            found[heading].append(line)
    return {key: "\n".join(value) for key, value in found.items()}


@pytest.mark.parametrize("name", PUBLIC)
def test_the_docstring_has_an_examples_section(name):
    examples = sections(getattr(daskmeans, name)).get("Examples", "")
    assert ">>>" in examples, f"daskmeans.{name}: its docstring needs an Examples section with a >>> example."


@pytest.mark.parametrize("name", PUBLIC)
def test_the_examples_run(name):
    obj = getattr(daskmeans, name)
    tests = doctest.DocTestFinder(recurse=False).find(obj, f"daskmeans.{name}", globs={})
    assert tests and tests[0].examples, f"daskmeans.{name}: no doctest found"
    report = []
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    for test in tests:
        runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)


@pytest.mark.parametrize("name", IMPLEMENTS_A_PAPER)
def test_the_paper_is_cited(name):
    references = sections(getattr(daskmeans, name)).get("References", "")
    assert re.search(r"doi:10\.\d{4,}/\S+|arXiv:\d{4}\.\d{4,5}", references), (
        f"daskmeans.{name}: its References section must cite its paper with a DOI or an arXiv id."
    )


@pytest.mark.parametrize("name", sorted(SIBLINGS))
def test_the_siblings_are_named(name):
    see_also = sections(getattr(daskmeans, name)).get("See Also", "")
    missing = [sibling for sibling in SIBLINGS[name] if not re.search(rf"^{sibling}\b", see_also, re.MULTILINE)]
    assert not missing, f"daskmeans.{name}: its See Also section does not name {missing}."
