"""One module per algorithm: each orchestrates passes and returns a plain result object."""
