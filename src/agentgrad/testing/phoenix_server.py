"""A real Arize Phoenix server on loopback ports, SQLite in a folder of its own: started and stopped by a
test (``phoenix serve``; Phoenix installed in an environment of its own, as ``.ci/run`` does, since its
server pins other versions of libraries agentgrad's extras use), and spans sent to it the way an app's
OpenTelemetry exporter sends them (OTLP over HTTP, protobuf)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from agentgrad.testing.llama_server import free_port


def phoenix_command(root: Path) -> str | None:
    """The ``phoenix`` executable: ``$AGENTGRAD_PHOENIX``, else ``ROOT/.venv-phoenix/bin/phoenix`` (what
    ``.ci/run`` installs), else one on the PATH; None if there is none."""
    for c in (os.environ.get("AGENTGRAD_PHOENIX"), str(root / ".venv-phoenix" / "bin" / "phoenix"), shutil.which("phoenix")):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    return None


class PhoenixServer:
    """``phoenix serve`` answering when the constructor returns (else RuntimeError, nothing left running);
    ``with PhoenixServer(...) as px`` stops it at the end."""

    def __init__(self, command: str, workdir: Path, wait: float = 180.0):
        self.port, grpc = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PHOENIX_WORKING_DIR": str(workdir), "PHOENIX_HOST": "127.0.0.1",
               "PHOENIX_PORT": str(self.port), "PHOENIX_GRPC_PORT": str(grpc), "PHOENIX_TELEMETRY_ENABLED": "false"}
        self.log = open(Path(workdir) / "phoenix.log", "wb")
        self.proc = subprocess.Popen([command, "serve"], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + wait
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.close()
                raise RuntimeError(f"phoenix serve exited with {self.proc.returncode}")
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1).read()
                return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"phoenix serve did not answer within {wait:.0f} s")

    def send_otlp_json(self, path: Path, project: str) -> int:
        """Send every OTLP JSON request of ``path`` (one a line) to the server's ``/v1/traces`` as protobuf,
        into ``project`` (the ``openinference.project.name`` resource attribute); returns the spans sent."""
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        sent = 0
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            req = json.loads(line)
            for rs in req["resourceSpans"]:
                attrs = rs.setdefault("resource", {}).setdefault("attributes", [])
                attrs[:] = [a for a in attrs if a.get("key") != "openinference.project.name"]
                attrs.append({"key": "openinference.project.name", "value": {"stringValue": project}})
                for ss in rs["scopeSpans"]:
                    for sp in ss["spans"]:  # OTLP JSON writes ids in hex, protobuf's JSON mapping in base64
                        for k in ("traceId", "spanId", "parentSpanId"):
                            if sp.get(k):
                                sp[k] = base64.b64encode(bytes.fromhex(sp[k])).decode()
                        sent += 1
            body = json_format.Parse(json.dumps(req), ExportTraceServiceRequest()).SerializeToString()
            urllib.request.urlopen(urllib.request.Request(self.url + "/v1/traces", data=body, headers={
                "Content-Type": "application/x-protobuf"}), timeout=30).read()
        return sent

    def wait_for_spans(self, project: str, n: int, wait: float = 60.0) -> None:
        """Until the server lists ``n`` spans of ``project`` (it ingests in the background)."""
        import httpx
        from phoenix.client import Client

        client = Client(base_url=self.url)
        deadline = time.time() + wait
        while time.time() < deadline:
            try:
                if len(client.spans.get_spans(project_identifier=project, limit=n + 1)) >= n:
                    return
            except httpx.HTTPStatusError:  # the project appears with its first span; until then, ask again
                pass
            time.sleep(0.5)
        raise RuntimeError(f"Phoenix did not list {n} spans of {project!r} within {wait:.0f} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def __enter__(self) -> "PhoenixServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
