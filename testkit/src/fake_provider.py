#!/usr/bin/env python3
"""A scripted OpenAI-compatible model provider on 127.0.0.1 for the ocsb run tests.

A user message "RUN: <cmd>" gets a streamed `bash` tool call; once the tool result is in the
conversation, a streamed text answer. A user message "SKILL: <name>" likewise gets a call of
OpenCode's `skill` tool with {"name": "<name>"} (only when the request offers that tool), then a
text answer. A summarization request (OpenCode's compaction: the system prompt of its
`compaction` agent, "You are a context summarization agent", and the conversation in
<conversation> tags in the user message) gets a short Markdown summary. Anything else (e.g.
OpenCode's title requests) gets "Test title" text. Every reply reports fixed usage (prompt 1002
with 200 cached, completion 50) and streams its chunks over ~0.5 s so output speed is
measurable. Each request body is appended as one JSON line to requests.jsonl next to this
script (if that directory is writable), with the credential it came with under "_auth", for
tests that check what OpenCode sent. Prints the port on stdout, then serves until killed.

Environment: FAKE_PROVIDER_BIND (default 127.0.0.1) is the address to listen on;
FAKE_PROVIDER_TLS=<cert.pem>:<key.pem> serves HTTPS; FAKE_PROVIDER_TITLE_DELAY=<s> holds a
request that offers no tools (OpenCode's title request) that long before it answers, so that a
test can order it after the turn's own request.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "requests.jsonl")
LOG_LOCK = threading.Lock()
USAGE = {"prompt_tokens": 1002, "completion_tokens": 50, "total_tokens": 1052,
         "prompt_tokens_details": {"cached_tokens": 200}}


# OpenCode's compaction prompt: a Markdown template with these sections.
SUMMARY = ["## Objective\n- Scripted session.\n\n", "## Important Details\n- (none)\n\n",
           "## Work State\n### Completed\n- (none)\n\n### Active\n- (none)\n\n### Blocked\n- (none)\n\n",
           "## Next Move\n1. (none)\n\n", "## Relevant Files\n- (none)\n"]


def content_text(m):
    c = m.get("content")
    if isinstance(c, str):
        return c
    return " ".join(p.get("text", "") for p in c or [] if isinstance(p, dict))


def summarizing(msgs):
    """OpenCode's compaction request: no tools, its summarization system prompt, and the
    conversation so far in <conversation> tags."""
    system = " ".join(content_text(m) for m in msgs if m.get("role") == "system")
    user = " ".join(content_text(m) for m in msgs if m.get("role") == "user")
    return "context summarization agent" in system or "<conversation>" in user


def offers(req, tool):
    return any(t.get("function", {}).get("name") == tool for t in req.get("tools") or [])


def chunk(delta, finish=None, usage=None):
    c = {"id": "c1", "object": "chat.completion.chunk", "created": int(time.time()), "model": "m1",
         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        c["usage"] = usage
        c["choices"] = []
    return "data: " + json.dumps(c) + "\n\n"


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "m1", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        req = json.loads(self.rfile.read(n) or b"{}")
        try:
            logged = dict(req, _auth=self.headers.get("authorization") or self.headers.get("x-api-key"))
            with LOG_LOCK, open(LOG, "a") as log:
                log.write(json.dumps(logged) + "\n")
        except OSError:
            pass  # a directory the provider may not write to: no log
        msgs = req.get("messages", [])
        last = msgs[-1] if msgs else {}
        text = ""
        for m in msgs:
            if m.get("role") == "user":
                c = m.get("content")
                text = c if isinstance(c, str) else " ".join(p.get("text", "") for p in c if isinstance(p, dict))
        if not req.get("tools") and not summarizing(msgs):
            time.sleep(float(os.environ.get("FAKE_PROVIDER_TITLE_DELAY", "0")))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        out = []
        out.append(chunk({"role": "assistant", "content": ""}))
        if "RUN: " in text and last.get("role") != "tool" and req.get("tools"):
            cmd = text.split("RUN: ", 1)[1].strip()
            args = json.dumps({"command": cmd, "description": "run the requested command"})
            out.append(chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                              "function": {"name": "bash", "arguments": ""}}]}))
            for i in range(0, len(args), 8):
                out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[i:i + 8]}}]}))
            out.append(chunk({}, "tool_calls"))
        elif summarizing(msgs):
            for w in SUMMARY:
                out.append(chunk({"content": w}))
            out.append(chunk({}, "stop"))
        elif "SKILL: " in text and last.get("role") != "tool" and offers(req, "skill"):
            name = (text.split("SKILL: ", 1)[1].split() or [""])[0]
            args = json.dumps({"name": name})
            out.append(chunk({"tool_calls": [{"index": 0, "id": "call_s1", "type": "function",
                                              "function": {"name": "skill", "arguments": args}}]}))
            out.append(chunk({}, "tool_calls"))
        else:
            words = ["Done", "."] if last.get("role") == "tool" else ["Test", " title"]
            for w in words * 5:
                out.append(chunk({"content": w}))
            out.append(chunk({}, "stop"))
        out.append(chunk({}, usage=USAGE))
        out.append("data: [DONE]\n\n")
        for i, c in enumerate(out):
            self.wfile.write(c.encode())
            self.wfile.flush()
            time.sleep(0.5 / len(out))
        self.close_connection = True


if __name__ == "__main__":
    srv = ThreadingHTTPServer((os.environ.get("FAKE_PROVIDER_BIND", "127.0.0.1"), 0), H)
    tls = os.environ.get("FAKE_PROVIDER_TLS")
    if tls:
        import ssl
        cert, key = tls.split(":")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()
