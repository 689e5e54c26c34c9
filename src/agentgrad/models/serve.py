"""A real OpenAI-compatible chat-completions server on 127.0.0.1, answering from any
:class:`LanguageModel` (a tiny HF model, a fake script), with injected failures.

Serves a local model to any OpenAI-compatible client (``agentgrad testing serve``), and the tests of
the ``openai`` backend use it: it speaks HTTP and the wire format, so the client's retries, timeouts
and tool-call handling are exercised for real. ``response_format`` (``json_schema``, or llama.cpp's
``json_object`` with a ``schema``) is passed to the model as an output schema, so a served local
model decodes under it; ``structured=False`` answers such a request with a 400 instead, as a server
without structured output does. Loopback only.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentgrad.core.model import GenerationSettings, LanguageModel, OutputSchema


def output_schema(response_format: Any) -> OutputSchema | None:
    """The output schema a request's ``response_format`` asks for (None: free text)."""
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        return OutputSchema(name=spec.get("name") or "reply", json_schema=spec.get("schema") or {})
    if response_format.get("type") == "json_object" and isinstance(response_format.get("schema"), dict):
        return OutputSchema(json_schema=response_format["schema"])
    return None


def _from_openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        o = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            o["tool_calls"] = [
                {"id": c.get("id", ""), "name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                for c in m["tool_calls"]
            ]
        if m.get("tool_call_id"):
            o["tool_call_id"] = m["tool_call_id"]
        out.append(o)
    return out


class OpenAICompatServer:
    """Serve ``model`` at ``http://127.0.0.1:PORT/v1``.

    Args:
        model: answers every request.
        fail_rate: fraction of requests answered with 500 or 429 (alternately chosen at random).
        seed: seeds the failure injection, so a test sees the same failures each run.
        port: 0 picks a free port.
        latency: seconds every request waits before it is answered (a remote model's round trip;
            requests wait concurrently, as they would on a real server).
        structured: honour ``response_format``; False: refuse it with a 400, as a server without
            structured output does.
    """

    def __init__(self, model: LanguageModel, fail_rate: float = 0.0, seed: int = 0, port: int = 0, model_id: str = "tiny",
                 latency: float = 0.0, structured: bool = True):
        self.model = model
        self.structured = structured
        self.latency = latency
        self.fail_rate = fail_rate
        self.model_id = model_id
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "failed": 0, "answered": 0}
        self.bodies: list[dict[str, Any]] = []  # every request body answered, for tests
        self._conns: set[Any] = set()  # open client connections (kept alive between requests)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`stop` (from another thread) or Ctrl-C."""
        self._httpd.serve_forever()

    def start(self) -> "OpenAICompatServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop as a server process that exits does: no new connection is accepted, and the open
        (kept-alive) ones are closed, so a client sees refused connections from then on."""
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> "OpenAICompatServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _decide_failure(self) -> int | None:
        with self._lock:
            self.stats["requests"] += 1
            if self._rng.random() < self.fail_rate:
                self.stats["failed"] += 1
                return self._rng.choice([500, 429])
        return None

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """Answer one chat-completions request body."""
        with self._lock:
            self.bodies.append(body)
        if self.latency > 0:
            time.sleep(self.latency)
        settings = GenerationSettings(  # what is absent takes OpenAI's defaults (temperature 1, no cap)
            temperature=1.0 if body.get("temperature") is None else body["temperature"],
            top_p=body.get("top_p") or 1.0,
            max_new_tokens=body.get("max_tokens") or body.get("max_completion_tokens"),
            seed=body.get("seed"),
            stop=body.get("stop") or [],
            output=output_schema(body.get("response_format")),
        )
        gen = self.model.generate(_from_openai_messages(body["messages"]), body.get("tools"), settings)
        message: dict[str, Any] = {"role": "assistant", "content": gen.text}
        if gen.tool_calls:
            message["tool_calls"] = [
                {"id": c.id or f"call_{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for i, c in enumerate(gen.tool_calls)
            ]
        with self._lock:
            self.stats["answered"] += 1
        return {
            "id": f"chatcmpl-{self.stats['answered']}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model_id),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if gen.tool_calls else "stop"}],
            "usage": {
                "prompt_tokens": gen.usage.get("prompt_tokens", 0),
                "completion_tokens": gen.usage.get("completion_tokens", 0),
                "total_tokens": sum(gen.usage.values()),
            },
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body are two writes: with Nagle's algorithm on, the body waits for the
            # client's delayed ACK (about 40 ms a request), a delay no real server adds
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server._conns.add(self.connection)

            def finish(self) -> None:
                with server._lock:
                    server._conns.discard(self.connection)
                try:
                    super().finish()
                except OSError:  # the connection was closed by stop()
                    pass

            def _send(self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model_id, "object": "model"}]})
                elif self.path.rstrip("/").endswith("/stats"):  # requests, failed, answered (for benchmarks)
                    with server._lock:
                        self._send(200, dict(server.stats))
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                code = server._decide_failure()
                if code == 429:
                    self._send(429, {"error": {"message": "rate limited (injected)", "type": "rate_limit"}}, {"Retry-After": "0"})
                    return
                if code == 500:
                    self._send(500, {"error": {"message": "internal error (injected)", "type": "server_error"}})
                    return
                try:
                    body = json.loads(raw)
                    if body.get("response_format") and not server.structured:
                        self._send(400, {"error": {"message": "response_format is not supported by this server",
                                                   "type": "invalid_request_error"}})
                        return
                    self._send(200, server.complete(body))
                except Exception as e:  # report as the servers we imitate do
                    self._send(400, {"error": {"message": f"{type(e).__name__}: {e}", "type": "invalid_request_error"}})

        return Handler
