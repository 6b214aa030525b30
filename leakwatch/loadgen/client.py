"""One streaming OpenAI-compatible request over a kept-alive connection, timed per chunk.

Built on geventhttpclient (what Locust's FastHttpUser uses) rather than Locust's client wrappers, so
the clock starts right before the request is written and each chunk is stamped the moment its line
is read. A new connection is opened before the clock starts: its TCP handshake, and the other users'
work the event loop runs while this one waits for it, are not the server's time to first token (at
256 users starting together they added ~28 ms to each first request's TTFT against the reference
server's record); it is kept apart as `connect`. Every way a server can misbehave ends in a `StreamResult` with a failure class; nothing
here raises to the Locust user, except GreenletExit (Locust stopping the user), which is recorded as
cancelled and re-raised so the user stops.
"""

from __future__ import annotations

import errno
import json
import socket
import time
from urllib.parse import urlsplit

from gevent import GreenletExit
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

from . import outcomes, sse
from .outcomes import StreamResult

ERROR_BODY_LIMIT = 64 * 1024
# A connection idle for longer is replaced before the next request: servers close idle keep-alive
# connections (uvicorn after 5 s), and a request written into one that is closing fails as no_response
# through no fault of the server. Under the production-day shape most requests open a new connection,
# as real clients with long pauses do.
IDLE_RECONNECT_S = 2.0
API_PATHS = {"chat": "/chat/completions", "completions": "/completions"}


def api_base_path(url: str) -> str:
    """The /v1 prefix under the host URL (a host given with /v1, e.g. http://vllm-host/v1, works too)."""
    path = urlsplit(url).path.rstrip("/")
    return path if path.endswith("/v1") else f"{path}/v1"


def request_body(api: str, model: str, content, max_tokens: int, ignore_eos: bool, extra: dict | None = None) -> bytes:
    """The JSON body of a streaming request; `content` is messages (chat) or a prompt string."""
    body: dict = {"model": model, "stream": True, "max_tokens": max_tokens, "stream_options": {"include_usage": True}}
    if api == "chat":
        body["messages"] = content
    else:
        body["prompt"] = content
    if ignore_eos:
        # vLLM's extension: generate exactly max_tokens, so output lengths follow the configured
        # distribution even when a model would stop early.
        body["ignore_eos"] = True
    body.update(extra or {})
    return json.dumps(body).encode()


def error_message(body: bytes) -> str:
    """The human part of an error body: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err.get("msg")
            if msg:
                return " ".join(str(msg).split())[:200]
        elif isinstance(err, str):
            return err[:200]
        if "detail" in data:
            return " ".join(str(data["detail"]).split())[:200]
    return " ".join(text.split())[:200]


class StreamingClient:
    """One connection to one server (Locust users each hold their own, like real clients)."""

    def __init__(
        self, base_url: str, api_key: str | None = None, connect_timeout: float = 10.0, request_timeout: float = 300.0
    ):
        parts = urlsplit(base_url if "://" in base_url else f"http://{base_url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_path = api_base_path(base_url)
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._client_args = dict(
            host=parts.hostname,
            port=parts.port,
            ssl=parts.scheme == "https",
            connection_timeout=connect_timeout,
            network_timeout=request_timeout,
            concurrency=1,
            headers=headers,
            insecure=False,
        )
        self._http: HTTPClient | None = None
        self._idle_since: float | None = None  # when the kept-alive connection last finished a request

    def _client(self) -> HTTPClient:
        if self._http is None:
            self._http = HTTPClient(**self._client_args)
        return self._http

    def _connect(self) -> None:
        """Have a live connection in the pool (opening one if none is kept alive), so that the
        request that follows writes at once. The pool holds one socket (concurrency=1), LIFO, so the
        request takes this one."""
        pool = self._client()._connection_pool
        pool.return_socket(pool.get_socket())

    def close(self) -> None:
        self._idle_since = None
        if self._http is not None:
            try:
                self._http.close()
            finally:
                self._http = None

    def stream(self, api: str, body: bytes, headers: dict | None = None, keep_text: bool = False) -> StreamResult:
        """One streaming request; `headers` are this request's own (e.g. its x-request-id);
        `keep_text` keeps the generated text in the result (for samples; it costs CPU per chunk)."""
        if self._idle_since is not None and time.monotonic() - self._idle_since > IDLE_RECONNECT_S:
            self.close()  # the server may be closing it right now (uvicorn's keep-alive is 5 s)
        reused = self._http is not None and self._idle_since is not None
        result = self._stream(api, body, headers, keep_text)
        if reused and result.outcome == "no_response":
            # The kept-alive connection was closed under us before any response: the request never
            # reached the server's handler, so it is sent again on a new connection (as browsers do).
            result = self._stream(api, body, headers, keep_text)
            result.retried = True
        return result

    def _stream(self, api: str, body: bytes, headers: dict | None = None, keep_text: bool = False) -> StreamResult:
        self._idle_since = None
        result = StreamResult()
        path = self.base_path + API_PATHS[api]
        chat = api == "chat"
        response = None
        got_headers = False
        clock = time.perf_counter
        result.start = start = clock()
        try:
            self._connect()
            result.connect = clock() - start
            result.start = start = clock()
            response = self._client().request("POST", path, body=body, headers=headers)
            got_headers = True
            result.status = status = response.status_code
            if status != 200:
                raw = response.read(ERROR_BODY_LIMIT) if status != 204 else b""
                result.response_bytes = len(raw)
                return self._fail(result, outcomes.http_failure(status), error_message(raw), start)
            ctype = (response.get("content-type") or "").lower()
            if "text/event-stream" not in ctype:
                raw = response.read(ERROR_BODY_LIMIT)
                result.response_bytes = len(raw)
                return self._fail(
                    result,
                    "not_streaming",
                    f"HTTP 200 with content-type {ctype or 'none'!r} instead of text/event-stream",
                    start,
                )
            self._read_events(response, result, chat, start, [] if keep_text else None)
        except GreenletExit:
            result.outcome = outcomes.CANCELLED
            result.e2e = clock() - start
            self.close()
            raise
        except sse.MalformedStream as exc:
            self._fail(result, "malformed_sse", str(exc), start)
        except TimeoutError:
            if got_headers:
                self._fail(result, "stream_timeout", "no data within the request timeout", start)
            else:
                self._fail(result, "response_timeout", "no response within the request timeout", start)
        except (HTTPConnectionClosed, HTTPParseError, ConnectionResetError, BrokenPipeError) as exc:
            if got_headers:
                self._fail(result, "stream_cut", f"connection closed mid-stream ({type(exc).__name__})", start)
            else:
                self._fail(result, "no_response", "connection closed before a response", start)
        except OSError as exc:  # refused, unreachable, DNS (socket.gaierror), reset during connect
            if got_headers:
                self._fail(result, "stream_cut", f"connection error mid-stream: {exc}", start)
            else:
                self._fail(result, "connect_error", _connect_detail(exc), start)
        except Exception as exc:  # noqa: BLE001 - a load test reports, it does not crash
            self._fail(result, "client_error", f"{type(exc).__name__}: {exc}", start)
        # After a failure the pool is closed and `response` goes out of scope here, which closes its
        # socket (HTTPSocketPoolResponse.__del__): a broken connection is never reused.
        return result

    def _read_events(self, response, result: StreamResult, chat: bool, start: float, texts: list | None) -> None:
        parser = sse.EventParser()
        clock = time.perf_counter
        last = None
        itls = result.itls
        readline = response.readline
        done = False
        nbytes = 0
        while True:
            line = readline(b"\n")
            if not line:
                event = parser.flush()  # a last event without its blank line
                if event is None:
                    break
            else:
                nbytes += len(line)
                event = parser.feed(line)
                if event is None:
                    continue
            if event is sse.DONE:
                done = True
                continue
            now = clock()
            if "error" in event and not event.get("choices"):
                result.response_bytes = nbytes
                err = event["error"]
                msg = err.get("message") if isinstance(err, dict) else err
                self._fail(result, "stream_error", " ".join(str(msg).split())[:200], start)
                return
            if sse.chunk_has_token(event, chat):
                if last is None:
                    result.ttft = now - start
                else:
                    itls.append(now - last)
                last = now
                result.chunks += 1
                if texts is not None:
                    texts.append(sse.chunk_text(event, chat))
            usage = event.get("usage")
            if usage:
                result.output_tokens = usage.get("completion_tokens")
                result.prompt_tokens = usage.get("prompt_tokens")
            if not line:
                break
        result.response_bytes = nbytes
        if texts is not None:
            result.text = "".join(texts)
        # The end of the stream: the last output chunk, as vLLM's client measures it.
        end = clock()
        result.e2e = (last if last is not None else end) - start
        if not done:
            if response.message_complete:
                self._fail(result, "stream_cut", "the stream ended without [DONE]", start, end)
            else:
                self._fail(result, "stream_cut", "connection closed mid-stream", start, end)
        elif result.chunks == 0:
            self._fail(result, "no_tokens", "the stream finished without any generated token", start, end)
        elif result.output_tokens is None:
            self._fail(result, "no_usage", "the stream finished without a usage report", start, end)
        else:
            # Keep-alive: the connection returns to the pool for the next request.
            response.release()
            self._idle_since = time.monotonic()

    def _fail(
        self, result: StreamResult, outcome: str, detail: str, start: float, end: float | None = None
    ) -> StreamResult:
        result.outcome = outcome
        result.detail = detail
        result.e2e = (end if end is not None else time.perf_counter()) - start
        self.close()  # never reuse a connection in an unknown state
        return result


def _connect_detail(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host ({exc.strerror or exc})"
    if exc.errno == errno.ECONNREFUSED:
        return "connection refused (is the server running on that port?)"
    if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "host unreachable"
    return str(exc) or type(exc).__name__
