"""``python -m daskmeans.bench``: the benchmark command on its own."""

from .command import bench

if __name__ == "__main__":
    bench(prog_name="python -m daskmeans.bench")
