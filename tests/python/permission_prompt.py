"""Claude Code's own permission flow in headless mode: an MCP tool passed
with `--permission-prompt-tool`, standing in for the person at the
terminal. It allows every tool but ExitPlanMode, whose request it records
(in the file PERMISSION_LOG names) and denies with a message the model
reads, so a test can tell that Claude Code asked it rather than Cairn."""

import json
import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("perm")


@server.tool(structured_output=False)
def ask(tool_name: str, input: dict, tool_use_id: str | None = None) -> str:  # noqa: A002 (Claude Code's name)
    if tool_name != "ExitPlanMode":
        return json.dumps({"behavior": "allow", "updatedInput": input})
    with open(os.environ["PERMISSION_LOG"], "a") as log:
        log.write(json.dumps({"tool_name": tool_name, "tool_use_id": tool_use_id}) + "\n")
    return json.dumps({"behavior": "deny", "message": "Asked at the terminal: not now."})


if __name__ == "__main__":
    server.run()
