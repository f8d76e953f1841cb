"""CITATION.cff: parseable, and its version is the package's."""

from pathlib import Path

import yaml

import daskmeans

CITATION = Path(__file__).resolve().parents[1] / "CITATION.cff"


def test_citation_file_names_the_current_version_and_the_papers():
    citation = yaml.safe_load(CITATION.read_text(encoding="utf-8"))
    assert citation["cff-version"] == "1.2.0"
    assert str(citation["version"]) == daskmeans.__version__
    assert citation["license"] == "BSD-3-Clause"
    identifiers = {reference["doi"] for reference in citation["references"]}
    assert identifiers == {
        "10.1016/j.neucom.2018.03.059",  # VRKM
        "10.48550/arXiv.1602.02934",  # nested mini-batch k-means
        "10.48550/arXiv.1810.00803",  # vc-GMM
        "10.48550/arXiv.2410.05902",  # mini-batch kernel k-means
    }
