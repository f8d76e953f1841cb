"""The version of daskmeans (read by pyproject.toml, saved in every model and bench record)."""

__version__ = "0.1.0"
