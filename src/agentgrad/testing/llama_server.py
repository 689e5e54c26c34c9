"""llama-cpp-python's OpenAI-compatible server on the embedded SmolLM2 GGUF, on a free loopback port:
started and stopped by a test or a benchmark (``pip install 'llama-cpp-python[server]'``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

from agentgrad.models.openai_compat import OpenAIModel


def free_port() -> int:
    """A loopback port nothing listens on now (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """The server, answering when the constructor returns (else RuntimeError, nothing left running);
    ``with LlamaServer(...) as srv`` stops it at the end, as :meth:`stop` does."""

    def __init__(self, n_ctx: int = 2048, chat_format: str = "chatml", n_threads: int = 2, wait: float = 120.0):
        from agentgrad.models.spec import embedded_gguf

        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_gguf("smollm2")), "--host", "127.0.0.1",
             "--port", str(self.port), "--n_ctx", str(n_ctx), "--chat_format", chat_format, "--n_threads",
             str(n_threads)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + wait
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the llama.cpp server exited with {self.proc.returncode}")
            try:
                urllib.request.urlopen(self.base_url + "/models", timeout=1).read()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the llama.cpp server did not answer within {wait:.0f} s")

    def model(self, **kw) -> OpenAIModel:
        """The ``openai`` backend on this server (``kw``: its options, such as ``max_retries``)."""
        return OpenAIModel(name="default", model="smollm2", base_url=self.base_url, **kw)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
