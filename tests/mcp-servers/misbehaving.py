#!/usr/bin/env python3
"""An MCP server over stdio that misbehaves on purpose, for Jarvis's tests: it answers MCP's
handshake and lists one tool, `work`, then on a call to it does what its first argument says:

  exit     exits without answering (a server that crashes mid-call)
  silent   never answers (a server that hangs)
  garbage  writes a line that is not JSON-RPC and an answer whose result is not a tool's
           result, and stays (a server that answers garbage)
  fine     answers "worked"
  grows    answers "worked", having added a tool, `more`, and said its tools changed
           (`notifications/tools/list_changed`) first

With a second argument, a file: the first server started with it exits right after listing its
tools (it dies between calls); the next one, finding the file, behaves as its mode says.

Each line it reads is one JSON-RPC message, as MCP's stdio transport says."""
import json
import sys

import os

mode = sys.argv[1] if len(sys.argv) > 1 else "fine"
dies_after_listing = False
tools = [{
    "name": "work",
    "description": "Does some work.",
    "inputSchema": {"type": "object", "properties": {}}}]
if len(sys.argv) > 2 and not os.path.exists(sys.argv[2]):
    open(sys.argv[2], "w").close()
    dies_after_listing = True


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    try:
        message = json.loads(line)
    except ValueError:
        continue
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        continue  # a notification
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": ident, "result": {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "misbehaving", "version": "1.0.0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools}})
        if dies_after_listing:
            sys.exit(0)
    elif method == "tools/call":
        if mode == "exit":
            sys.exit(3)
        if mode == "silent":
            continue
        if mode == "garbage":
            sys.stdout.write("this is not JSON-RPC\n")
            send({"jsonrpc": "2.0", "id": ident, "result": "nonsense"})
            continue
        called = message["params"]["name"]
        if mode == "grows" and len(tools) == 1:
            tools.append({
                "name": "more",
                "description": "Does more work.",
                "inputSchema": {"type": "object", "properties": {}}})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "id": ident, "result": {
            "content": [{"type": "text", "text": "worked" if called == "work" else f"{called} worked"}]}})
    else:
        send({"jsonrpc": "2.0", "id": ident,
              "error": {"code": -32601, "message": "no such method"}})
