"""Sphinx configuration of the daskmeans documentation.

Build: ``python -m sphinx -W -b html docs docs/_build/html`` (``pip install -e ".[docs]"`` first).
"""

from __future__ import annotations

import filecmp
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(ROOT))

import daskmeans  # after the path above, so that the checkout's package is documented

project = "daskmeans"
author = "The daskmeans developers"
copyright = "the daskmeans developers"
release = daskmeans.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_click",
    "myst_nb",
    "daskmeans_docs",
]

# -- sources ---------------------------------------------------------------------------------------------------
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# -- API reference ---------------------------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"member-order": "groupwise"}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True

# -- Markdown and notebooks ------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # the notebooks are run by the test suite; the site shows them as committed

# -- HTML ------------------------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"daskmeans {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_static_path: list[str] = []


def copy_notebooks() -> None:
    """Copy ``notebooks/*.ipynb`` into ``docs/_notebooks/`` (git-ignored) for myst-nb to render.

    A copy is made only when the notebook changed, so that an incremental build does not read them again.
    """
    target = DOCS / "_notebooks"
    target.mkdir(exist_ok=True)
    sources = sorted((ROOT / "notebooks").glob("*.ipynb"))
    for source in sources:
        copy = target / source.name
        if not copy.exists() or not filecmp.cmp(source, copy, shallow=False):
            shutil.copy2(source, copy)
    names = {source.name for source in sources}
    for stale in target.glob("*.ipynb"):
        if stale.name not in names:
            stale.unlink()


copy_notebooks()


def register_lazy_commands() -> None:
    """Give sphinx-click every command of ``daskmeans --help``: it reads a group's ``commands``, where the
    commands of optional modules (``bench``) are added only when first used."""
    import click

    from daskmeans.cli import main

    context = click.Context(main)
    for name in main.list_commands(context):
        main.commands.setdefault(name, main.get_command(context, name))


register_lazy_commands()
