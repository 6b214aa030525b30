"""A reference streaming server: OpenAI-compatible SSE with scripted timings, and a record of the truth.

`make bench-loadgen` judges a client's TTFT and ITL against what the server really did, not against
another client on a noisy server. This server answers /v1/completions and /v1/chat/completions
(streaming, usage in the last chunk, as vLLM sends it), /v1/models and /health. For every request
it waits a first-token delay and then gaps between tokens drawn from known distributions (log-normal
TTFT, gamma ITL), seeded by the request's key, so every client meets the same script. It records
the moment it read the request line and the moment each token's chunk was handed to the socket
(time.perf_counter after the write, on the event loop that wrote it).

A request's key: its `x-request-id` header (both leakwatch's load generator and vLLM's benchmark
client send one), else a `[lw-req N]` nonce in the prompt, else a counter. The first token's text
carries the key (` <key>`) so a client that keeps only the generated text can be paired too.

    python -m benchmarks.loadgen.reference_server --port 8123
    GET /truth          the record since the last reset: {key: {"received", "tokens": [write times],
                        "scripted_ttft", "prompt" (its start), "fields" (max_tokens, ignore_eos, stop, ...)}}
    POST /truth/reset   clear it

Bound to 127.0.0.1 unless --host says otherwise. Not a model: every token is the word " the".
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import re
import signal
import socket
import struct
import time
from dataclasses import dataclass

from leakwatch.core.settings import ready_path

VLLM_HEALTH_PATH = ready_path("vllm")

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux
NONCE = re.compile(r"\[lw-req ([A-Za-z0-9_.:-]+)\]")
MAX_BODY = 16 * 1024 * 1024
PROMPT_KEPT = 512
RECORDED_FIELDS = ("max_tokens", "ignore_eos", "skip_special_tokens", "stop", "stop_token_ids", "temperature")


@dataclass(frozen=True)
class Script:
    """The timing distributions: TTFT log-normal (median, sigma), ITL gamma (mean, shape)."""

    ttft_median_s: float = 0.200
    ttft_sigma: float = 0.5
    itl_mean_s: float = 0.050
    itl_shape: float = 4.0
    seed: int = 0

    def timings(self, key: str, tokens: int) -> tuple[float, list[float]]:
        """(first-token delay, gaps before tokens 2..n) for one request; the same key, the same script."""
        digest = hashlib.sha256(f"{self.seed}:{key}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        ttft = rng.lognormvariate(math.log(self.ttft_median_s), self.ttft_sigma)
        gaps = [rng.gammavariate(self.itl_shape, self.itl_mean_s / self.itl_shape) for _ in range(max(0, tokens - 1))]
        return ttft, gaps


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class ReferenceServer:
    def __init__(self, script: Script, model: str = "reference", max_model_len: int = 4096):
        self.script = script
        self.model = model
        self.max_model_len = max_model_len
        self.record: dict[str, dict] = {}
        self.counter = 0

    # -- HTTP/1.1 with keep-alive, just enough for OpenAI clients -----------------------------------------

    async def handle(self, conn: Connection) -> None:
        try:
            while True:
                request_line = await conn.readline()
                # When the kernel received the request's first byte: the server's own scheduling lag
                # (a busy loop, a busy machine) is not counted as the client's.
                received = conn.line_arrival
                if not request_line or not request_line.strip():
                    break
                try:
                    method, target, _version = request_line.decode("latin-1").split(" ", 2)
                except ValueError:
                    await self._send_json(conn, 400, {"error": {"message": "bad request line"}}, close=True)
                    break
                headers = {}
                while True:
                    line = await conn.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                try:
                    length = int(headers.get("content-length") or 0)
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_BODY:
                    await self._send_json(
                        conn,
                        413 if length > 0 else 400,
                        {"error": {"message": "bad or too large content-length"}},
                        close=True,
                    )
                    break
                body = await conn.readexactly(length) if length else b""
                keep = await self.route(method, target.split("?", 1)[0], headers, body, conn, received)
                if not keep or headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, EOFError):
            pass
        finally:
            conn.close()

    async def route(self, method, path, headers, body, conn, received) -> bool:
        path = path.rstrip("/")
        if path.endswith(("/v1/completions", "/v1/chat/completions")):
            if method != "POST":
                return await self._send_json(conn, 405, {"error": {"message": "use POST"}})
            try:
                request = self._parse(body, chat=path.endswith("/chat/completions"))
            except BadRequest as exc:
                return await self._send_json(conn, exc.status, {"error": {"message": str(exc), "code": exc.status}})
            await self.stream(conn, request, headers, received)
            return True
        if path == VLLM_HEALTH_PATH:
            return await self._send(conn, 200, b"", "text/plain")
        if path == "/v1/models":
            return await self._send_json(
                conn,
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self.model,
                            "object": "model",
                            "owned_by": "leakwatch",
                            "root": self.model,
                            "max_model_len": self.max_model_len,
                        }
                    ],
                },
            )
        if path == "/truth" and method == "GET":
            return await self._send_json(conn, 200, self.record)
        if path == "/truth/reset" and method == "POST":
            self.record = {}
            return await self._send_json(conn, 200, {"reset": True})
        return await self._send_json(conn, 404, {"error": {"message": f"no route {method} {path}"}})

    def _parse(self, body: bytes, chat: bool) -> dict:
        try:
            data = json.loads(body or b"null")
        except ValueError:
            raise BadRequest(400, "the body is not JSON") from None
        if not isinstance(data, dict):
            raise BadRequest(400, "the body is not a JSON object")
        if data.get("model") not in (None, self.model):
            raise BadRequest(404, f"The model `{data.get('model')}` does not exist.")
        if not data.get("stream"):
            raise BadRequest(400, 'this reference server only streams (set "stream": true)')
        tokens = data.get("max_tokens", data.get("max_completion_tokens", 16))
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise BadRequest(400, "max_tokens must be a positive integer")
        if chat:
            messages = data.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest(400, "messages must be a non-empty list")
            text = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        else:
            text = data.get("prompt")
            if isinstance(text, list):
                text = " ".join(map(str, text))
            if not isinstance(text, str):
                raise BadRequest(400, "prompt must be a string")
        usage = bool((data.get("stream_options") or {}).get("include_usage"))
        fields = {k: data[k] for k in RECORDED_FIELDS if k in data}
        return {"chat": chat, "text": text, "tokens": tokens, "usage": usage, "fields": fields}

    def _key(self, headers: dict, text: str) -> str:
        key = headers.get("x-request-id")
        if not key:
            match = NONCE.search(text)
            key = match.group(1) if match else None
        if not key or key in self.record:
            self.counter += 1
            key = f"{key or 'anon'}#{self.counter}"
        return key

    async def stream(self, conn, request: dict, headers: dict, received: float) -> None:
        key = self._key(headers, request["text"])
        n = request["tokens"]
        ttft, gaps = self.script.timings(key, n)
        # What arrived is kept too (the prompt's start, the sampling fields), so a test can see what a
        # client really sent.
        entry = {
            "received": received,
            "tokens": [],
            "scripted_ttft": ttft,
            "prompt": request["text"][:PROMPT_KEPT],
            "fields": request["fields"],
        }
        self.record[key] = entry
        conn.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        chat = request["chat"]
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{key}"
        created = int(time.time())
        base = {
            "id": rid,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": self.model,
        }
        if chat:
            self._event(
                conn,
                {
                    **base,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
                },
            )

        # The chunks are encoded once per request: the server's own CPU per token stays small, so its
        # writes keep to the script at hundreds of streams.
        def encoded(text: str, finish) -> bytes:
            if chat:
                choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            data = b"data: " + json.dumps({**base, "choices": [choice]}, separators=(",", ":")).encode() + b"\n\n"
            return b"%x\r\n%s\r\n" % (len(data), data)

        middle, last = encoded(" the", None), encoded(" the", "length")
        # The first token is due ttft after the request arrived; each next one its gap after the last
        # write (a late token delays the rest, as on a real server, instead of a catch-up burst).
        due = received + ttft
        stamps = entry["tokens"]
        for i in range(n):
            if i:
                due = stamps[-1] + gaps[i - 1]
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if i == 0:
                conn.write(encoded(f" {key}", "length" if n == 1 else None))
            else:
                conn.write(last if i == n - 1 else middle)
            stamps.append(time.perf_counter())
            if conn.pending:
                await conn.drain()  # a slow reader: wait, as a real server's flow control does
        if request["usage"]:
            prompt_tokens = max(1, len(request["text"].split()))
            self._event(
                conn,
                {
                    **base,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": n,
                        "total_tokens": prompt_tokens + n,
                    },
                },
            )
        self._chunk(conn, b"data: [DONE]\n\n")
        conn.write(b"0\r\n\r\n")
        await conn.drain()

    @staticmethod
    def _chunk(conn, data: bytes) -> None:
        conn.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _event(self, conn, payload: dict) -> None:
        self._chunk(conn, b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")

    async def _send_json(self, conn, status: int, payload, close: bool = False) -> bool:
        return await self._send(conn, status, json.dumps(payload).encode(), "application/json", close)

    @staticmethod
    async def _send(conn, status: int, body: bytes, ctype: str, close: bool = False) -> bool:
        reason = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            405: "Method Not Allowed",
            413: "Payload Too Large",
        }.get(status, "Error")
        conn.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
            f"{'connection: close' + chr(13) + chr(10) if close else ''}\r\n".encode()
            + body
        )
        await conn.drain()
        return not close


class Connection:
    """One client connection on a non-blocking socket, read with recvmsg to get the kernel's receive
    timestamp (SO_TIMESTAMPNS) of every segment; written with send, buffering what the socket refuses."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop):
        self.sock = sock
        self.loop = loop
        self.fd = sock.fileno()
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:  # not Linux: the arrival is when the loop reads it (the server's lag counts then)
            pass
        self.buffer = bytearray()
        self.consumed = 0  # stream offset of buffer[0]
        self.segments: list[tuple[int, float]] = []  # (stream offset, perf_counter arrival) of each recv
        self.received = 0  # stream offset after the last recv
        self.eof = False
        self.line_arrival = 0.0
        self.out = bytearray()
        self.closed = False
        self._readable: asyncio.Future | None = None
        self._drained: asyncio.Future | None = None
        loop.add_reader(self.fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            data, ancillary, _flags, _addr = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(16))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, ancillary = b"", []
        now_perf, now_wall = time.perf_counter(), time.time()
        arrival = now_perf
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                sec, nsec = struct.unpack("qq", value[:16])
                # The kernel stamps in wall-clock time; moved onto perf_counter's scale.
                arrival = min(now_perf, now_perf - (now_wall - (sec + nsec / 1e9)))
        if data:
            self.segments.append((self.received, arrival))
            self.received += len(data)
            self.buffer += data
        else:
            self.eof = True
            self.loop.remove_reader(self.fd)
        if self._readable is not None and not self._readable.done():
            self._readable.set_result(None)

    async def _wait_readable(self) -> None:
        if self.eof:
            raise EOFError
        self._readable = self.loop.create_future()
        await self._readable

    def _arrival_of(self, offset: int) -> float:
        while len(self.segments) > 1 and self.segments[1][0] <= offset:
            self.segments.pop(0)
        return self.segments[0][1] if self.segments else time.perf_counter()

    def _take(self, n: int) -> bytes:
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        self.consumed += n
        return data

    async def readline(self) -> bytes:
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                self.line_arrival = self._arrival_of(self.consumed)
                return self._take(end + 1)
            if len(self.buffer) > MAX_BODY:
                raise ConnectionError("line too long")
            if self.eof:
                return self._take(len(self.buffer))
            await self._wait_readable()

    async def readexactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            await self._wait_readable()
        return self._take(n)

    def write(self, data: bytes) -> None:
        if self.closed:
            raise ConnectionError("closed")
        if not self.out:
            try:
                sent = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self.close()
                raise ConnectionError(str(exc)) from None
            data = data[sent:]
            if not data:
                return
            self.loop.add_writer(self.fd, self._on_writable)
        self.out += data

    def _on_writable(self) -> None:
        try:
            sent = self.sock.send(self.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.out.clear()
            self.close()
            sent = 0
        del self.out[:sent]
        if not self.out:
            if not self.closed:
                self.loop.remove_writer(self.fd)
            if self._drained is not None and not self._drained.done():
                self._drained.set_result(None)

    @property
    def pending(self) -> int:
        return len(self.out)

    async def drain(self) -> None:
        if self.out and not self.closed:
            self._drained = self.loop.create_future()
            await self._drained
        if self.closed:
            raise ConnectionError("closed")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        for fut in (self._readable, self._drained):
            if fut is not None and not fut.done():
                fut.set_result(None)
        try:
            self.sock.close()
        except OSError:
            pass


async def serve(host: str, port: int, server: ReferenceServer) -> None:
    loop = asyncio.get_running_loop()
    listener = socket.create_server((host, port), backlog=4096, reuse_port=False)
    listener.setblocking(False)
    tasks: set[asyncio.Task] = set()

    def on_accept() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            task = loop.create_task(server.handle(Connection(sock, loop)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    loop.add_reader(listener.fileno(), on_accept)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"reference server on http://{host}:{listener.getsockname()[1]}", flush=True)
    await stop.wait()
    loop.remove_reader(listener.fileno())
    listener.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--model", default="reference", help="the one model name served")
    parser.add_argument("--ttft-median-ms", type=float, default=Script.ttft_median_s * 1000)
    parser.add_argument("--ttft-sigma", type=float, default=Script.ttft_sigma, help="log-normal sigma of the TTFT")
    parser.add_argument("--itl-mean-ms", type=float, default=Script.itl_mean_s * 1000)
    parser.add_argument("--itl-shape", type=float, default=Script.itl_shape, help="gamma shape of the ITL")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.ttft_median_ms <= 0 or args.itl_mean_ms <= 0 or args.ttft_sigma < 0 or args.itl_shape <= 0:
        parser.error("timings must be positive (sigma may be 0)")
    script = Script(args.ttft_median_ms / 1000, args.ttft_sigma, args.itl_mean_ms / 1000, args.itl_shape, args.seed)
    try:
        import uvloop  # what vLLM's own API server runs on; lower scheduling lag than asyncio's default loop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args.host, args.port, ReferenceServer(script, args.model)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
