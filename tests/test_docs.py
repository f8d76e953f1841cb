"""The documentation site: it builds without a warning, its API, command-line and settings references are
generated from the code, the tests it cites exist, its examples run, and the numbers it quotes are the code's.

Settings and estimator defaults are printed by the site's own roles (``docs/_ext/daskmeans_docs.py``), which fail
the build on a name that does not exist; the numbers a page writes out (byte counts per row, passes, sample sizes)
are checked here against the functions that decide them.
"""

from __future__ import annotations

import inspect
import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import numpy as np
import pytest

import daskmeans
from daskmeans import config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Folders under docs/ that are not pages written by hand (generated at build time, or another page's records).
NOT_HAND_WRITTEN = ("_build", "_notebooks", "generated", "results", "benchmarks")
#: Pages whose Python examples run as they are (the others need a cluster or data of their own).
RUNNABLE_EXAMPLE_PAGES = ("guide", "user/io.md", "user/large-k.md", "user/progress.md")


def hand_written_pages():
    """The Markdown and reStructuredText pages written by hand."""
    for path in sorted(DOCS.rglob("*")):
        relative = path.relative_to(DOCS)
        if path.suffix in (".md", ".rst") and relative.parts[0] not in NOT_HAND_WRITTEN:
            yield path


def page(name: str) -> str:
    """A page's text with its lines joined, so that a quoted phrase may span a line break."""
    return " ".join((DOCS / name).read_text(encoding="utf-8").split())


def python_examples(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.DOTALL)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built from scratch with every warning an error; the folder of its HTML."""
    out = tmp_path_factory.mktemp("html")
    doctrees = tmp_path_factory.mktemp("doctrees")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-E",
            "-q",
            "-b",
            "html",
            "-d",
            str(doctrees),
            str(DOCS),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        check=False,
    )
    assert built.returncode == 0, f"the documentation does not build without warnings:\n{built.stderr}"
    return out


# -- generated references ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_public_name_has_a_generated_api_page(site):
    names = [name for name in daskmeans.__all__ if name != "__version__"]
    missing = [name for name in names if not (site / "generated" / f"daskmeans.{name}.html").is_file()]
    assert not missing, f"no API page for {missing}: list them in docs/api.rst"


@pytest.mark.slow
def test_the_cli_reference_lists_every_command(site):
    source = (DOCS / "cli.rst").read_text(encoding="utf-8")
    assert ".. click:: daskmeans.cli:main" in source and ":nested: full" in source
    from daskmeans.cli import main

    html = (site / "cli.html").read_text(encoding="utf-8")
    commands = main.list_commands(click.Context(main))
    assert "fit" in commands and "bench" in commands
    missing = [name for name in commands if f'id="daskmeans-{name}"' not in html]
    assert not missing, f"commands missing from the generated CLI reference: {missing}"


@pytest.mark.slow
def test_the_settings_reference_lists_every_setting(site):
    html = (site / "user" / "configuration.html").read_text(encoding="utf-8")
    settings = [name for name in vars(config) if name.isupper()]
    missing = [name for name in settings if f'id="config-{name.lower()}"' not in html]
    assert settings and not missing, f"settings missing from the generated settings reference: {missing}"


@pytest.mark.slow
def test_the_notebooks_are_rendered(site):
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert (site / "_notebooks" / f"{notebook.stem}.html").is_file(), notebook.name


# -- what the pages cite and show ----------------------------------------------------------------------------------


def test_every_test_the_pages_cite_exists():
    cited = {}
    for path in hand_written_pages():
        for match in re.finditer(r"tests/[\w/]+\.py(?:::\w+)?", path.read_text(encoding="utf-8")):
            cited.setdefault(match.group(0), path.relative_to(DOCS))
    assert len(cited) > 20
    wrong = []
    for reference, where in cited.items():
        file, _, name = reference.partition("::")
        test_file = ROOT / file
        if not test_file.is_file() or (
            name and not re.search(rf"^\s*def {name}\(", test_file.read_text(), flags=re.MULTILINE)
        ):
            wrong.append(f"{where}: {reference}")
    assert not wrong, "pages cite tests that do not exist:\n" + "\n".join(wrong)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_examples_of_the_guide_run(tmp_path):
    examples = []
    for path in hand_written_pages():
        relative = path.relative_to(DOCS).as_posix()
        if relative.startswith(RUNNABLE_EXAMPLE_PAGES):
            examples.extend((relative, code) for code in python_examples(path))
    assert len(examples) >= 10
    script = tmp_path / "examples.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        for where, code in {examples!r}:
            try:
                exec(compile(code, where, "exec"), {{"__name__": "__main__"}})
            except Exception as error:
                sys.exit(f"the example of {{where}} failed: {{type(error).__name__}}: {{error}}")
    """)
    )
    ran = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False
    )
    assert ran.returncode == 0, ran.stderr[-3000:]


def test_every_python_block_of_the_pages_is_valid_python():
    for path in hand_written_pages():
        for code in python_examples(path):
            compile(code, str(path), "exec")


# -- numbers the pages write out -----------------------------------------------------------------------------------


def test_the_bytes_per_row_of_the_bounds_are_the_codes():
    from daskmeans.algorithms import nested
    from daskmeans.passes.bounded_assign import state_bytes_per_row

    formula = "d × itemsize + 20 + 2 × groups"
    assert formula in page("guide/kmeans.md") and formula in page("user/scale.md")
    for d, groups, itemsize in [(128, 100, 1), (784, 5, 4), (74, 20, 8), (2, 1, 2)]:
        assert state_bytes_per_row(d, groups, itemsize) == d * itemsize + 20 + 2 * groups

    cached, reread = "2 × (d × itemsize + 28 + 2 × groups)", "2 × (12 + 2 × groups)"
    for name in ("guide/nmbatch.md", "user/scale.md"):
        assert cached in page(name) and reread in page(name)
    for d, groups, itemsize in [(128, 100, 4), (784, 1, 8)]:
        assert nested.state_bytes_per_row(d, groups, itemsize, cached=True) == 2 * (d * itemsize + 28 + 2 * groups)
        assert nested.state_bytes_per_row(d, groups, itemsize, cached=False) == 2 * (12 + 2 * groups)


def test_the_far_rows_rule_is_the_codes():
    from daskmeans.passes.assign import far_rows

    text = page("guide/kmeans.md")
    assert "max({config}`N_FAR`, k / {config}`N_FAR_PER_CLUSTERS`) such far rows, at most {config}`N_FAR_MAX`" in text
    for k in (1, 10, 255, 256, 257, 1000, 8192, 8193, 10**6):
        assert far_rows(k) == min(config.N_FAR_MAX, max(config.N_FAR, k // config.N_FAR_PER_CLUSTERS))


def test_the_auto_algorithm_rule_is_the_codes():
    from daskmeans.estimators.kmeans import choose_algorithm

    plenty = 2**40
    assert choose_algorithm("auto", 10_000, 128, config.BOUNDS_MIN_CLUSTERS, 4, plenty) == "auto"
    assert choose_algorithm("auto", 10_000, 128, config.BOUNDS_MIN_CLUSTERS - 1, 4, plenty) == "none"
    k = 64
    small_d = config.ASSIGN_DIRECT_LIMIT // k
    assert choose_algorithm("auto", 10_000, small_d, k, 4, plenty) == "none"
    assert choose_algorithm("auto", 10_000, small_d + 1, k, 4, plenty) == "auto"
    assert choose_algorithm("auto", 10**9, 128, 1000, 4, memory_bytes=10**9) == "none"  # the state would not fit
    assert choose_algorithm("lloyd", 10_000, 128, 1000, 4, plenty) == "none"


def test_the_seeding_passes_are_the_fits():
    """The pass counts of the seeding table, measured: a fit's first record counts the summary pass, the seeding's
    passes and its own pass."""
    cells = {}
    for line in (DOCS / "guide" / "seeding.md").read_text(encoding="utf-8").splitlines():
        row = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if row and row[0].startswith('`"'):
            cells[row[0].split('"')[1].replace("\\|", "|")] = row[1]
    assert set(cells) == {"k-means||", "k-means++", "afk-mc2", "two-level", "random"}
    X = np.random.default_rng(0).normal(size=(3000, 4)).astype(np.float32)
    for init, cell in cells.items():
        quoted = re.search(r"\((\d+) at the defaults\)", cell) or re.match(r"(\d+)", cell)
        model = daskmeans.KMeans(5, init=init, max_iter=1, random_state=0).fit(X)
        assert int(quoted.group(1)) == model.history_[0]["passes"] - 2, init
    rounds = inspect.signature(daskmeans.KMeans).parameters["init_rounds"].default
    assert "2 + 2 × `init_rounds` (12 at the defaults)" in page("guide/seeding.md") and 2 + 2 * rounds == 12
    assert "12 for k-means|| at its defaults" in page("guide/kmeans.md")


def test_the_sample_sizes_and_iterations_the_pages_quote_are_the_codes():
    from daskmeans.algorithms import init, kernel_kmeans, nested, two_level

    assert "up to 30 weighted Lloyd iterations" in page("guide/seeding.md")
    assert inspect.signature(init.kmeans_parallel).parameters["recluster_iter"].default == 30
    assert "(default max(20 k, 10,000))" in page("guide/seeding.md")
    assert "max(20 * n_clusters, 10_000)" in inspect.getsource(init.kmeans_plusplus_on_sample)
    assert "by default max(20 k, {config}`INIT_SAMPLE_ROWS`)" in page("guide/kernel.md")
    assert "max(20 * n_clusters, INIT_SAMPLE_ROWS)" in inspect.getsource(kernel_kmeans)
    assert "by default max(5000, 80 k)" in page("guide/nmbatch.md")
    assert [nested.default_initial_batch_size(k) for k in (1, 62, 63, 1000)] == [5000, 5000, 5040, 80_000]
    for name in ("guide/seeding.md", "user/large-k.md"):
        assert "round(sqrt(k))" in page(name)
    assert all(two_level.default_coarse_clusters(k) == round(math.sqrt(k)) for k in (4, 1000, 16_384, 65_536))


def test_the_memory_figures_the_pages_quote_are_the_codes():
    assert "keep up to 128 MiB of freed heap" in page("user/scale.md")
    assert config.WORKER_MALLOC_ENVIRON["MALLOC_TRIM_THRESHOLD_"] == 128 * 2**20
    assert "(`4 n²` bytes: 400 MB at n = 10,000)" in page("guide/kernel.md")
    from daskmeans.estimators import kernel_full

    assert "4 n^2" in inspect.getsource(kernel_full) and 4 * 10_000**2 == 400 * 10**6
