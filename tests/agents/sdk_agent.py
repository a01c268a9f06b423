"""A small CLI agent written with the official anthropic SDK: the second agent that
proves evalctl's agent contract is not Claude-Code-specific.

It reads its task from its arguments, talks to whatever ANTHROPIC_BASE_URL and
ANTHROPIC_API_KEY say (evalctl's model proxy, in a run), streams every reply (server-sent
events), runs its own two tools (`save` a file, `shell` a command) and prints the model's
last words. Usage: python sdk_agent.py [--no-stream] PROMPT...
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anthropic

TOOLS = [
    {"name": "save", "description": "Write a text file (path relative to the working "
     "directory).", "input_schema": {"type": "object", "properties": {
         "path": {"type": "string"}, "text": {"type": "string"}},
         "required": ["path", "text"]}},
    {"name": "shell", "description": "Run a shell command and see its output.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                      "required": ["command"]}},
]


def use(name: str, arguments: dict) -> str:
    if name == "save":
        Path(arguments["path"]).write_text(arguments["text"], encoding="utf-8")
        return f"saved {arguments['path']}"
    if name == "shell":
        done = subprocess.run(arguments["command"], shell=True, capture_output=True, text=True,
                              timeout=60)
        return f"exit {done.returncode}\n{done.stdout}{done.stderr}"
    return f"unknown tool {name}"


def main(argv: list[str]) -> int:
    stream = "--no-stream" not in argv
    prompt = " ".join(a for a in argv if a != "--no-stream")
    client = anthropic.Anthropic(max_retries=0)
    messages: list[dict] = [{"role": "user", "content": prompt}]
    while True:
        request = {"model": "sdk-agent-model", "max_tokens": 1024, "tools": TOOLS,
                   "system": "You are a small agent.", "messages": messages}
        if stream:
            with client.messages.stream(**request) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**request)
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            print("".join(b.text for b in reply.content if b.type == "text"))
            return 0
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c.id, "content": use(c.name, dict(c.input))}
            for c in calls]})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
