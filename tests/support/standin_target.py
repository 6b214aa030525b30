"""A stand-in restart target for the healer's input tests: answers /health and vLLM's in-flight
gauges like vLLM does, and starts in a blink (argv: port [file to append its PID to on each start]).
The end-to-end drill restarts the real vLLM."""

import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = {
            "/health": b"",
            "/metrics": b'vllm:num_requests_running{model_name="demo"} 0.0\n'
            b'vllm:num_requests_waiting{model_name="demo"} 0.0\n',
        }.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args):
        pass


if os.environ.get("LEAKWATCH_STANDIN_IGNORE_SIGTERM") == "1":
    # A drain that outlasts the healer's patience: only supervisord's SIGKILL ends it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if len(sys.argv) > 2:
    # Every start appends this process's PID: tests count restarts from the target, not the healer's word.
    with open(sys.argv[2], "a") as fh:
        fh.write(f"{os.getpid()}\n")
HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
