"""A loopback HTTP server that speaks enough of the Messages API for the real SDK."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, dict[str, str], bytes]


def message(content: list[dict[str, Any]], stop_reason: str, *, input_tokens: int = 100,
            output_tokens: int = 20, cache_write: int = 0, cache_read: int = 0,
            model: str = "claude-sonnet-4-6", message_id: str = "msg_01") -> Reply:
    body = {
        "id": message_id, "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "cache_creation_input_tokens": cache_write,
                  "cache_read_input_tokens": cache_read},
    }
    return 200, {"content-type": "application/json"}, json.dumps(body).encode()


def error(status: int, kind: str, text: str, **headers: str) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": text}}
    return status, {"content-type": "application/json", **headers}, json.dumps(body).encode()


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use(block_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": block_id, "name": name, "input": arguments}


class MessagesServer:
    """Serves queued replies in order and records every request it received."""

    def __init__(self) -> None:
        self.replies: list[Reply | Callable[[dict[str, Any]], Reply]] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append({"path": self.path, **body})
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                reply = server.replies.pop(0) if server.replies else error(
                    500, "api_error", "the test server ran out of replies")
                if callable(reply):
                    reply = reply(body)
                status, headers, payload = reply
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> MessagesServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
