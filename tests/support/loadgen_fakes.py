"""Small real HTTP servers that misbehave on purpose (our own fakes of broken servers and proxies).

Each answers over a real socket with exact bytes, so the client is tested against what it will meet:
chunked streams cut mid-way, JSON where SSE was asked for, garbage lines, stalls.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def completion_chunk(text: str) -> dict:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": None}]}


def chat_chunk(content: str | None = None, role: str | None = None) -> dict:
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def usage_chunk(prompt: int, completion: int) -> dict:
    return {
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def good_stream(tokens: int = 5, chat: bool = False, gap: float = 0.0) -> list:
    """Events of a well-behaved stream: (role chunk,) token chunks, usage, [DONE]."""
    events = [chat_chunk(role="assistant", content="")] if chat else []
    for i in range(tokens):
        events.append(chat_chunk(f"t{i}") if chat else completion_chunk(f"t{i}"))
        if gap:
            events.append(("sleep", gap))
    return events + [usage_chunk(7, tokens), b"[DONE]"]


class Behaviour:
    """What the server does with one request; `respond(sock)` writes raw bytes."""

    def respond(self, sock: socket.socket) -> None:
        raise NotImplementedError


class Stream(Behaviour):
    """A chunked text/event-stream response built from events; `cut_after` stops without the last chunk."""

    def __init__(
        self,
        events,
        cut_after: int | None = None,
        content_type: str = "text/event-stream",
        raw_lines: list[bytes] | None = None,
        finish: bool = True,
    ):
        self.events = events
        self.cut_after = cut_after
        self.content_type = content_type
        self.raw_lines = raw_lines
        self.finish = finish

    def respond(self, sock):
        sock.sendall(
            f"HTTP/1.1 200 OK\r\ncontent-type: {self.content_type}\r\n"
            f"transfer-encoding: chunked\r\nconnection: close\r\n\r\n".encode()
        )
        pieces = self.raw_lines if self.raw_lines is not None else self.events
        for i, event in enumerate(pieces):
            if self.cut_after is not None and i >= self.cut_after:
                return  # connection closes without the terminating chunk
            if isinstance(event, tuple) and event[0] == "sleep":
                time.sleep(event[1])
                continue
            payload = event if self.raw_lines is not None else sse(event)
            sock.sendall(b"%x\r\n%s\r\n" % (len(payload), payload))
        if self.finish:
            sock.sendall(b"0\r\n\r\n")


class Status(Behaviour):
    def __init__(self, status: int, body: dict | str, content_type: str = "application/json"):
        self.status = status
        self.body = json.dumps(body).encode() if isinstance(body, dict) else body.encode()
        self.content_type = content_type

    def respond(self, sock):
        sock.sendall(
            f"HTTP/1.1 {self.status} X\r\ncontent-type: {self.content_type}\r\n"
            f"content-length: {len(self.body)}\r\nconnection: close\r\n\r\n".encode()
            + self.body
        )


class Stall(Behaviour):
    """Sends the first `events` then stops sending (the client's timeout must fire)."""

    def __init__(self, seconds: float, headers: bool):
        self.seconds = seconds
        self.headers = headers

    def respond(self, sock):
        if self.headers:
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            payload = sse(completion_chunk("a"))
            sock.sendall(b"%x\r\n%s\r\n" % (len(payload), payload))
        time.sleep(self.seconds)


class Hangup(Behaviour):
    def respond(self, sock):
        return  # read the request, close without a byte


class FakeServer:
    """Serves `behaviour` (or behaviours[i % n] for the i-th generation request) on 127.0.0.1, one
    thread per connection; keep-alive is off so every request is a fresh connection. GET /v1/models
    and POST /tokenize answer like vLLM (tokens = characters / 4), so a Locust run can start."""

    def __init__(self, *behaviours: Behaviour, model: str = "fake", max_model_len: int = 2048):
        self.behaviours = behaviours
        self.model = model
        self.max_model_len = max_model_len
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                request = _read_request(self.request)
                if request is None:
                    return
                path, body = request
                if path.endswith("/v1/models"):
                    Status(
                        200, {"object": "list", "data": [{"id": server.model, "max_model_len": server.max_model_len}]}
                    ).respond(self.request)
                    return
                if path.endswith("/tokenize"):
                    Status(200, {"count": max(1, len(json.dumps(body)) // 4)}).respond(self.request)
                    return
                with server._lock:
                    index = len(server.requests)
                    server.requests.append(body)
                behaviour = server.behaviours[index % len(server.behaviours)]
                try:
                    behaviour.respond(self.request)
                except OSError:
                    pass

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()


def _read_request(sock: socket.socket) -> tuple[str, dict] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    path = head.split(b" ", 2)[1].decode()
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += sock.recv(65536)
    try:
        return path, (json.loads(body) if body else {})
    except ValueError:
        return path, {"raw": body.decode(errors="replace")}
