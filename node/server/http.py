"""The status endpoint of a daemon: `/metrics` (Prometheus text) and `/status` (JSON).

A few lines of asyncio HTTP/1.0 instead of a web framework: two read-only GETs need no more.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class StatusHttp:
    def __init__(self, registry: CollectorRegistry, status: Callable[[], dict]):
        self.registry, self.status = registry, status
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        """`tls`: serve HTTPS (Kudu's --webserver-certificate-file) instead of HTTP."""
        self._server = await asyncio.start_server(self._serve, host, port, ssl=tls)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            parts = line.decode("latin-1").split()
            path = parts[1] if len(parts) >= 2 else ""
            while (await asyncio.wait_for(reader.readline(), 5)).strip():
                pass  # headers are not needed
            if path == "/metrics":
                code, ctype, body = 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
            elif path in ("/status", "/"):
                code, ctype = 200, "application/json"
                body = json.dumps(self.status(), indent=1, default=str).encode()
            else:
                code, ctype, body = 404, "text/plain", b"not found: try /status or /metrics\n"
            writer.write(f"HTTP/1.0 {code} {'OK' if code == 200 else 'Not Found'}\r\n"
                         f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                         + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError, ssl.SSLError):
            pass
        finally:
            writer.close()
