"""Text as every part of evalctl shows it: truncation, binary detection, rates and money.

One module so that a tool's output, a grader's detail, a ledger line and a report cell
are cut, and money is shown, the same way everywhere.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable
from typing import Any

BINARY_SAMPLE_BYTES = 8192
_TEXT_CONTROLS = frozenset(b"\t\n\r\f\x1b")
SURROGATE = re.compile("[\ud800-\udfff]")  # a lone one: not a character; no path holds it
# Invisible characters that change how the text around them is shown: the bidirectional
# controls (U+202A-U+202E, U+2066-U+2069, the marks U+200E, U+200F and U+061C), which can
# reorder a line as it is displayed (Trojan Source), and other format characters that
# are not seen at all (U+200B, U+2060-U+2064, U+206A-U+206F, U+FEFF, U+FFF9-U+FFFB, and
# the tag characters U+E0000-U+E007F, which can spell a hidden text). Zero-width joiners
# (U+200C, U+200D) and the soft hyphen are left: ordinary text in several scripts needs
# them, and they reorder nothing.
_FORMAT = "\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb" \
    "\U000e0000-\U000e007f"
_SURROGATE_OR_CONTROL = re.compile(
    f"[\ud800-\udfff\x00-\x08\x0b-\x0c\x0e-\x1f\x7f{_FORMAT}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, as os and surrogateescape keep it
        return f"\\x{code - 0xDC00:02x}"
    if code > 0xFFFF:
        return f"\\U{code:08x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_surrogates(text: str) -> str:
    """`text` that can always be encoded as UTF-8: a lone surrogate becomes an escape.

    A file name that is not UTF-8 reaches Python as surrogate escapes, and a model can
    send a lone surrogate; either would make writing or sending the text fail. A byte of
    a name becomes `\\xNN` (as `ls -b` shows it), any other lone surrogate `\\uXXXX`.
    """
    return SURROGATE.sub(_escape, text) if SURROGATE.search(text) else text


def escape_text(text: str) -> str:
    """`text` safe to show in any report: lone surrogates escaped as in
    `escape_surrogates`, control characters other than tab and line breaks as `\\xNN`,
    and the invisible characters that reorder or hide text (bidirectional controls,
    `_FORMAT`) as `\\uXXXX`, so nothing is lost, no reporter can choke on it, and no
    rendered report reads other than it is."""
    return _SURROGATE_OR_CONTROL.sub(_escape, text) \
        if _SURROGATE_OR_CONTROL.search(text) else text


# Made once: json.dumps with any option set builds a new encoder for every call, a
# third of the cost of encoding a ledger's short lines.
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


def json_line(record: Any) -> str:
    """One JSON line for an append-only record (a ledger, the journal), readable as
    UTF-8 whatever the strings hold: a lone surrogate is written as its JSON escape
    (`\\ud800`), which reads back as the same string."""
    text = _LINE_ENCODER.encode(record)
    # A lone surrogate is only ever inside a JSON string, where \\uXXXX is its escape.
    # isascii() is a flag of the string's, not a scan: most lines skip the search.
    if not text.isascii() and SURROGATE.search(text):
        text = SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def parse_json(text: str | bytes) -> Any:
    """`json.loads(text)`, where a value nested deeper than Python's recursion reaches
    (`[` a hundred thousand times) is a ValueError, as any other text that is not JSON
    is, never a RecursionError: for every JSON evalctl reads that it did not just write
    (a report, a journal, a downloaded run directory)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def truncate(text: str, limit: int, keep: str = "both") -> str:
    """`text` cut to about `limit` characters, saying that it was cut.

    `keep` chooses what survives: "both" the head and the tail with the number of
    characters elided between them (command output: the start says what ran, the end
    how it ended), "head" the start followed by "…", "tail" "..." followed by the end.
    """
    if len(text) <= limit:
        return text
    if keep == "head":
        return text[: max(limit - 1, 0)] + "…"
    if keep == "tail":
        return "..." + text[-limit:]
    if keep != "both":
        raise ValueError(f"keep must be 'both', 'head' or 'tail', not {keep!r}")
    half = limit // 2
    elided = len(text) - 2 * half
    return f"{text[:half]}\n[... {elided} characters elided ...]\n{text[-half:]}"


def looks_binary(sample: bytes) -> bool:
    """Whether a file whose first bytes are `sample` is binary rather than text.

    Binary means: the first 8 KiB hold a NUL byte, and either they are not UTF-8 once
    the NULs are set aside, or more than a tenth of them are control bytes. A stray NUL
    in a source file does not make it binary (so a grader that scans text cannot be
    dodged with one), while images, archives and executables are binary.
    """
    sample = sample[:BINARY_SAMPLE_BYTES]
    if b"\x00" not in sample:
        return False
    controls = sum(1 for byte in sample if byte < 32 and byte not in _TEXT_CONTROLS)
    if controls * 10 > len(sample):
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(sample.replace(b"\x00", b""), final=False)  # a cut last character is fine
    except UnicodeDecodeError:
        return True
    return False


def sum_costs(costs: Iterable[float | None]) -> float | None:
    """The total in USD, or None when any part is unpriced: never a silent $0."""
    total = 0.0
    for cost in costs:
        if cost is None:
            return None
        total += cost
    return round(total, 6)


def percent(value: float | None, digits: int = 1) -> str:
    """A rate as a percentage, or "n/a" when there is nothing to rate."""
    return "n/a" if value is None else f"{value:.{digits}%}"


def money(value: float | None) -> str:
    """USD, or "unpriced" for a model with no price: never a silent $0."""
    return "unpriced" if value is None else f"${value:.4f}"


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the option closest in spelling to `word`, or "" when
    none is close: how every refusal of an unknown name offers the likely one."""
    import difflib  # only when a name was wrong

    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""

