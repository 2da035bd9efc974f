"""A Slack-compatible incoming-webhook endpoint on 127.0.0.1: a real HTTP server recording each JSON body."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer


class Receiver:
    def __init__(self):
        self.messages: list[dict] = []
        received = self.messages

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/T000/B000"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def texts(self) -> list[str]:
        return [m["text"] for m in self.messages]

    def close(self) -> None:
        self.server.shutdown()
