"""`evalctl init`: a starter suite of one's own, with the schema an editor validates it
against, composed from the plugins installed where it is written.

The suite has two scripted-provider tasks, so it runs offline with no API key: one that
passes, and one without a script that fails the way a lazy agent fails (it claims
success and does nothing), with the script that makes it pass commented out below it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from evalctl._errors import UsageError
from evalctl._files import write_atomically
from evalctl._suite.schema import registry_schema, schema_text

SUITE_FILE = "suite.yaml"
SCHEMA_FILE = "suite.schema.json"
PASSING_TASK = "write-a-greeting"
FAILING_TASK = "summarize-notes"
UNCOMMENT_MARKER = "Uncomment the script below and this task passes:"
_PLAIN_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9 _.-]*$")

STARTER_SUITE = f"""\
# yaml-language-server: $schema={SCHEMA_FILE}
#
# A starter suite, written by `evalctl init`. Each task puts an agent to work in a fresh
# workspace and grades what it left behind. The tasks have a `script:`: the turns the
# scripted provider plays, so this suite runs offline, with no API key. Run it with a
# real model with --provider (docs: the suite format, graders and tools).
name: NAME
tasks:
  - id: {PASSING_TASK}
    prompt: Create hello.txt containing exactly the line "Hello, evalctl!".
    checks:
      - type: succeeded          # the agent said it finished: talk alone is not enough,
      - type: file_contains      # so this check looks at the file it left behind
        path: hello.txt
        regex: "^Hello, evalctl!$"
    script:
      - tool_calls:
          - tool: write_file
            input:
              path: hello.txt
              content: "Hello, evalctl!\\n"
      - text: Created hello.txt with the greeting.

  - id: {FAILING_TASK}
    prompt: >
      Read notes.md and write summary.md: one line for each decision the meeting took.
    files:
      notes.md: |
        Meeting, 3 June.
        Decided: we ship on Friday.
        Decided: the beta flag stays off.
        Open: who writes the changelog?
    checks:
      - type: file_exists
        path: summary.md
      - type: file_contains
        path: summary.md
        text: ship on Friday
      - type: no_placeholders
    # This task fails on purpose. It has no script, so the scripted provider answers
    # "Done: the task is complete." and does nothing, like an agent that only claims
    # success; the checks of summary.md catch it.
    # {UNCOMMENT_MARKER}
    # script:
    #   - tool_calls:
    #       - tool: read_file
    #         input:
    #           path: notes.md
    #   - tool_calls:
    #       - tool: write_file
    #         input:
    #           path: summary.md
    #           content: "- We ship on Friday.\\n- The beta flag stays off.\\n"
    #   - text: Wrote summary.md with the meeting's two decisions.
"""


@dataclass(frozen=True)
class Starter:
    """What `evalctl init` wrote."""

    suite: Path
    schema: Path


def starter_suite(name: str) -> str:
    """The starter suite's text, named `name` (or "starter" when the name would need
    quoting in YAML)."""
    return STARTER_SUITE.replace("NAME", name if _PLAIN_NAME.match(name) else "starter", 1)


def write_starter(directory: Path, registry: object, force: bool = False) -> Starter:
    """Write the starter suite and its schema into `directory` (created if need be).
    Refuses to overwrite either file unless `force`: a UsageError naming them."""
    suite, schema = directory / SUITE_FILE, directory / SCHEMA_FILE
    existing = [str(path) for path in (suite, schema) if path.exists()]
    if existing and not force:
        verb = "exists" if len(existing) == 1 else "exist"
        raise UsageError(f"{' and '.join(existing)} already {verb}; choose another directory "
                         "(evalctl init DIR), or overwrite with --force")
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} is a file; evalctl init writes into a directory")
    try:
        write_atomically(schema, schema_text(registry_schema(registry)))
        write_atomically(suite, starter_suite(directory.resolve().name))
    except OSError as exc:
        raise UsageError(f"cannot write the starter suite into {directory}: "
                         f"{exc.strerror or exc}") from None
    return Starter(suite, schema)
