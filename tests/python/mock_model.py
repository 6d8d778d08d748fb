"""A loopback mock of the three model APIs the agent CLIs speak: Anthropic
Messages (Claude Code), OpenAI Responses (Codex) and Gemini
generateContent (Gemini CLI). The one thing the agent tests script.

Each reply is the next tool call of a script, chosen by how many tool
results the conversation already holds; when the script is done, a text
answer ends the turn. A conversation whose first user message holds
"SUBTASK-CHILD" is a sub-agent's and follows the child script.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Script:
    """Tool calls as (name, arguments), for the main agent and a sub-agent.
    A Codex tool of a namespace is named `namespace/name`."""

    def __init__(self, main, child=()):
        self.main = list(main)
        self.child = list(child)
        self.requests = []

    def tool_results(self):
        """Every tool result the agent sent back, as text, in order (each
        conversation repeats earlier ones: deduplicated by call id)."""
        seen, out = set(), []
        for _, body in self.requests:
            for m in body.get("messages", []):
                for b in m.get("content") if isinstance(m.get("content"), list) else []:
                    if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") not in seen:
                        seen.add(b.get("tool_use_id"))
                        out.append(_text_of(b.get("content")))
            for it in body.get("input", []):
                if it.get("type") == "function_call_output" and it.get("call_id") not in seen:
                    seen.add(it.get("call_id"))
                    out.append(it.get("output") if isinstance(it.get("output"), str) else json.dumps(it.get("output")))
        return out

    def next_call(self, is_child, done, body=None):
        """The call after `done` results; arguments may be a function of
        the request (to answer with what an earlier result said)."""
        calls = self.child if is_child else self.main
        if done >= len(calls):
            return None
        name, args = calls[done]
        return name, args(body) if callable(args) else args


def spawned_agent(body):
    """The id of the agent a Codex `spawn_agent` call started, from its
    result in the conversation."""
    for item in body.get("input", []):
        if item.get("type") == "function_call_output":
            try:
                out = json.loads(item.get("output") or "{}")
            except ValueError:
                continue
            if isinstance(out, dict) and out.get("agent_id"):
                return out["agent_id"]
    return ""


def _sse(handler, events):
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("cache-control", "no-cache")
    handler.end_headers()
    for name, data in events:
        if name:
            handler.wfile.write(f"event: {name}\n".encode())
        handler.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
        handler.wfile.flush()


def _text_of(content):
    if isinstance(content, str):
        return content
    out = []
    for block in content or []:
        if isinstance(block, dict):
            out.append(block.get("text", "") or "")
            if isinstance(block.get("content"), (str, list)):
                out.append(_text_of(block["content"]))
    return " ".join(out)


class Handler(BaseHTTPRequestHandler):
    script: Script = None
    counter = [0]
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _body(self):
        n = int(self.headers.get("content-length", 0))
        return json.loads(self.rfile.read(n) or b"{}")

    def _id(self, prefix):
        with self.lock:
            self.counter[0] += 1
            return f"{prefix}_{self.counter[0]:04d}"

    def do_GET(self):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"data": [], "models": []}')

    def do_POST(self):
        path = self.path.split("?")[0]
        body = self._body()
        self.script.requests.append((path, body))
        if path.endswith("/v1/messages"):
            return self.anthropic(body)
        if path.endswith("/responses"):
            return self.openai(body)
        if ":streamGenerateContent" in path or ":generateContent" in path:
            return self.gemini(path, body)
        self.send_response(404)
        self.end_headers()

    # ---- Anthropic Messages (Claude Code)
    def anthropic(self, body):
        messages = body.get("messages", [])
        first = _text_of(messages[0]["content"]) if messages else ""
        is_child = "SUBTASK-CHILD" in first
        done = sum(
            1
            for m in messages
            for b in (m.get("content") if isinstance(m.get("content"), list) else [])
            if isinstance(b, dict) and b.get("type") == "tool_result"
        )
        call = self.script.next_call(is_child, done, body) if body.get("tools") else None
        mid = self._id("msg")
        events = [("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": body.get("model", "mock"),
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}})]
        if call:
            name, args = call
            events += [
                ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                    "type": "tool_use", "id": self._id("toolu"), "name": name, "input": {}}}),
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(args)}}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                   "usage": {"output_tokens": 1}}),
            ]
        else:
            text = "Sub-agent finished." if is_child else "Plan done."
            events += [
                ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                   "usage": {"output_tokens": 1}}),
            ]
        events.append(("message_stop", {"type": "message_stop"}))
        if body.get("stream"):
            return _sse(self, events)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"id": mid, "type": "message", "role": "assistant", "model": "mock",
                                     "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                                     "usage": {"input_tokens": 1, "output_tokens": 1}}).encode())

    # ---- OpenAI Responses (Codex)
    def openai(self, body):
        items = body.get("input", [])
        first = ""
        for it in items:
            if it.get("role") == "user":
                first = _text_of(it.get("content"))
        is_child = any("SUBTASK-CHILD" in _text_of(it.get("content")) for it in items if it.get("role") == "user")
        done = sum(1 for it in items if it.get("type") == "function_call_output")
        call = self.script.next_call(is_child, done, body)
        rid = self._id("resp")
        events = [("response.created", {"type": "response.created", "response": {"id": rid}})]
        if call:
            name, args = call
            namespace, _, short = name.rpartition("/")
            item = {"type": "function_call", "name": short, "arguments": json.dumps(args), "call_id": self._id("call")}
            if name in ("spawn_agent", "wait_agent"):
                item["namespace"] = "multi_agent_v1"
            elif namespace:
                # Codex groups an MCP server's tools: `mcp__cairn/update_plan`.
                item["namespace"] = namespace
            events.append(("response.output_item.done", {"type": "response.output_item.done", "item": item}))
        else:
            events.append(("response.output_item.done", {"type": "response.output_item.done", "item": {
                "type": "message", "role": "assistant", "id": self._id("msg"),
                "content": [{"type": "output_text", "text": "Plan done."}]}}))
        events.append(("response.completed", {"type": "response.completed", "response": {"id": rid}}))
        _ = first
        return _sse(self, events)

    # ---- Gemini generateContent (Gemini CLI)
    def gemini(self, path, body):
        contents = body.get("contents", [])
        if ":generateContent" in path:
            # The model router asks for a JSON judgement.
            text = json.dumps({"reasoning": "mock", "model_choice": "pro", "complexity_reasoning": "mock",
                               "complexity_score": 50})
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                                         "finishReason": "STOP"}]}).encode())
            return
        done = sum(1 for c in contents for p in c.get("parts", []) if "functionResponse" in p)
        call = self.script.next_call(False, done) if body.get("tools") else None
        part = {"functionCall": {"name": call[0], "args": call[1]}} if call else {"text": "Plan done."}
        chunk = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2}}
        return _sse(self, [(None, chunk)])


def serve(script):
    """Starts the mock on a free loopback port; returns (server, base URL)."""
    handler = type("ScriptedHandler", (Handler,), {"script": script, "counter": [0], "lock": threading.Lock()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
