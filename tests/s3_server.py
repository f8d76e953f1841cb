"""A real S3-compatible HTTP server for the tests: moto's ``moto_server`` in a process of its own.

Workers, the client and command-line runs reach it over HTTP like any object store, with the storage options that
:func:`S3Server.storage_options` gives (endpoint, test credentials). Each test that writes gets a bucket of its own
(:meth:`S3Server.new_bucket`), so nothing one test writes is seen by another.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

#: The credentials moto accepts; any non-empty values do.
TEST_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


#: A request in the server's log: ``"GET /bucket/key HTTP/1.1"``.
_REQUEST = re.compile(r'"([A-Z]+) (\S+) HTTP/')


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on at ``host`` now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def moto_server_command(host: str, port: int) -> list[str]:
    """The command line that starts moto's S3 server listening on ``host:port``."""
    executable = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    if executable is None:
        raise RuntimeError("moto_server is not installed: pip install 'moto[server]' (the test extra has it)")
    return [executable, "-H", host, "-p", str(port)]


def wait_until_answering(url: str, timeout: float = 30.0, process: subprocess.Popen | None = None) -> None:
    """Block until an HTTP GET of ``url`` answers; raise ``RuntimeError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1.0):
                return
        except urllib.error.HTTPError:
            return  # it answered, with an error status: the server is up
        except OSError:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"the S3 server exited with code {process.returncode} before answering") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"the S3 server at {url} did not answer within {timeout:.0f} s") from None
            time.sleep(0.1)


class S3Server:
    """moto's S3 server in a subprocess, listening on ``host`` (a free port).

    Examples
    --------
    >>> server = S3Server().start()            # doctest: +SKIP
    >>> url = server.new_bucket()              # 's3://test-1a2b3c4d'
    >>> server.stop()
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = None):
        self.host = host
        self.port = port or free_port(host)
        self.process: subprocess.Popen | None = None
        self.log_path: str | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def storage_options(self) -> dict:
        """The fsspec/s3fs options that reach this server with the test credentials."""
        return {
            "endpoint_url": self.endpoint_url,
            "key": TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        }

    def environment(self) -> dict:
        """Environment variables that let s3fs reach this server with no storage options (as on a configured host)."""
        return {**TEST_CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint_url, "AWS_ENDPOINT_URL_S3": self.endpoint_url}

    def start(self) -> S3Server:
        env = {**os.environ, **TEST_CREDENTIALS}
        handle, self.log_path = tempfile.mkstemp(prefix="moto-server-", suffix=".log")
        with os.fdopen(handle, "wb") as log:  # the server logs one line per request on stderr
            self.process = subprocess.Popen(
                moto_server_command(self.host, self.port), stdout=subprocess.DEVNULL, stderr=log, env=env
            )
        wait_until_answering(f"{self.endpoint_url}/moto-api/", process=self.process)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self.log_path is not None:
            os.unlink(self.log_path)
            self.log_path = None

    def requests(self) -> list[tuple[str, str]]:
        """Every request the server has answered so far, in order, as ``(method, path)``."""
        with open(self.log_path, errors="replace") as log:
            return [found.groups() for found in map(_REQUEST.search, log) if found]

    def filesystem(self):
        """A new s3fs filesystem on this server (no instance cache, so no state crosses tests)."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False, **self.storage_options())

    def new_bucket(self) -> str:
        """Create an empty bucket with a unique name; return its URL ``s3://NAME``."""
        name = f"test-{uuid.uuid4().hex[:12]}"
        self.filesystem().mkdir(name)
        return f"s3://{name}"
