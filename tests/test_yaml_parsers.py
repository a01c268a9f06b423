"""The two readers of suite YAML agree: libyaml's fast path builds exactly what
strictyaml builds, or steps aside; and the compiled schema validator's "valid" is the
Python validator's."""

from __future__ import annotations

import math
import random

import pytest

from evalctl._suite.loader import load_suite, validate_suite
from evalctl._suite.yamlfast import parse_common
from evalctl._suite.yamlsource import YamlSyntaxError, parse_document

from .conftest import SUITES
from .test_suite_loading import MALFORMED, MINIMAL

TRICKY_DOCUMENTS = [
    MINIMAL * 3,
    "# a comment first\n\n" + MINIMAL + "# between items\n" + MINIMAL.replace("one", "two"),
    "name: x\ntasks:\n- id: a\n  prompt: p\n  checks:\n  - type: file_exists\n    path: x\n"
    "- id: b\n  prompt: |\n    keep\n\n      indented\n    \n  checks:\n  - type: succeeded\n"
    "defaults:\n  permissions: full\n",
    "tasks:\n  - id: a\n    prompt: >\n      folded\n      text\n\n    files:\n      a.txt: |\n"
    "        x   \n\n        y\n    checks:\n      - type: file_exists\n        path: a.txt\n"
    "  # a comment in the list\n  - id: b\n    prompt: \"quoted\n      across lines\"\n"
    "    checks:\n      - type: command\n        command: 'true'\n",
    "name: many\ntasks:\n" + "".join(
        f"  # item {i}\n\n  - id: t{i}\n    prompt: |\n      line {i}\n\n    checks:\n"
        f"      - type: file_exists\n        path: f{i}\n" for i in range(9)),
    # Every scalar the core schema types, quoted and not, keys that look like numbers.
    "- id: a\n  prompt: p\n  values:\n    - 1\n    - -0o7\n    - 0x1F\n    - 1.5e3\n    - .inf\n"
    "    - -.INF\n    - ~\n    - null\n    - True\n    - FALSE\n    - '1'\n    - \"true\"\n"
    "    - 2001-12-14\n    - yes\n    -\n  1: one\n  'null': x\n  checks:\n"
    "    - type: file_exists\n      path: x\n",
    # Double-quoted escapes, block indicators, chomping, Windows line endings.
    '- id: x\n  prompt: "a\\/b\\tc\\x41\\u00e9\\N\\_\\L\\P\\ z"\n  keep: |+\n    k\n\n'
    "  strip: >-\n    s\n    t\n  indented: |2\n      four\n",
    "a:\r\n  b: 1\r\n  c: |\r\n    x\r\n    y\r\n",
    "a:\n  -\n  - b\n  - \n    c: 1\n  - - nested\n    - list\n",
    "? explicit key\n: value\nplain: v\n",
]

BUILT_IN = [p.read_text() for p in sorted(SUITES.glob("*.yaml"))]


def _nan_free(value):
    """NaN != NaN: compare it as a word."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_free(v) for v in value]
    return value


def _agree(text: str) -> bool:
    """Whether the fast path took `text`; if it did, strictyaml must build the same."""
    fast = parse_common(text)
    if fast is None:
        return False
    try:
        slow = parse_document(text, "s.yaml")
    except YamlSyntaxError as exc:
        # ruamel's scanner crashes on some comments after a key (see the test below);
        # any other refusal of what the fast path took is a disagreement.
        assert "the parser could not read" in exc.message, (exc.line, exc.message)
        return True
    assert _nan_free(fast.data) == _nan_free(slow.data)
    assert fast.lines == slow.lines
    assert fast.key_lines == slow.key_lines
    return True


@pytest.mark.parametrize("text", TRICKY_DOCUMENTS + BUILT_IN)
def test_the_fast_path_takes_ordinary_suites_and_builds_what_strictyaml_builds(text):
    assert _agree(text)


def test_the_fast_path_steps_aside_for_the_malformed_corpus_or_agrees():
    taken = [name for name, (raw, _line, _words) in MALFORMED.items()
             if _agree(raw.decode("utf-8", "replace"))]
    # What the schema or the rules catch is parsed fast; what only strictyaml may rule
    # on (flow style, anchors, tags, duplicate keys, tabs, bad indentation) is not.
    assert "missing-prompt" in taken and "unknown-check" in taken
    assert not {"flow-unclosed", "flow-then-text", "duplicate-key", "anchor", "tag", "tabs",
                "bad-indent", "scalar-document"} & set(taken)


@pytest.mark.parametrize("text", [
    "- a: &x 1\n  b: *x\n",                      # anchor and alias
    "- a: !!str 1\n",                            # explicit tag
    "- a: ! 1\n",                                # the non-specific tag
    "- a: {b: 1}\n",                             # flow mapping
    "- a: []\n",                                 # an empty flow sequence
    "- a: 1\n  a: 2\n",                          # duplicate key
    "- <<:\n    a: 1\n",                         # merge key
    "- : empty key\n",
    "%YAML 1.2\n---\n- a: 1\n",                  # a directive
    "- a: 1\n---\n- b: 2\n",                     # two documents
    "---\n- a: 1\n...\n",                          # document markers
    "a:\n  x: 1\nb:\n    y: 2\n",                # uneven mapping values (strictyaml's rule)
    "- a: |\n    tab\there\n",                   # a tab anywhere
    "- a: one\x85two\n",                         # a line break only YAML 1.1 knows
    "- a: 1\r- b: 2\r",                          # old Mac line endings
    "a: 1\n\ufeff\n",                            # a byte-order mark inside (libyaml skips it)
    "a: 1\nb:\n\ufeff  c: x\n",
    "a: |#\n  x\n",                              # a comment right after a block header
    "a: >-#note\n  x\n",
    "just text\n",
    "- a: [\n",                                  # what libyaml refuses
])
def test_the_fast_path_steps_aside_for_what_only_strictyaml_may_rule_on(text):
    assert parse_common(text) is None


def test_strictyaml_still_rules_on_uneven_indentation():
    with pytest.raises(YamlSyntaxError, match="inconsistent"):
        parse_document("a:\n  x: 1\nb:\n    y: 2\n", "s.yaml")


def _mutations(seed: int, count: int) -> list[str]:
    """Documents one to three small edits away from the tricky ones and the corpus."""
    bases = TRICKY_DOCUMENTS + BUILT_IN + [raw.decode("utf-8", "replace")
                                           for name, (raw, _, _) in MALFORMED.items()
                                           if "deep" not in name]
    pieces = [" ", "  ", "\n", "- ", ":", ": ", "#", "'", '"', "|", ">", "|-", ">+", "?", "? ",
              "&a ", "*a", "!", "[", "]", "{", "}", ",", "\\", "%", "@", "---\n", "...\n",
              "x", "1", "0o7", ".inf", "~", "é", "\r\n", "|2", "  - ", "\n  ", "\n    ",
              "a: ", "<<: ", "\ufeff", "|#", ">-#"]
    rnd = random.Random(seed)
    out = []
    for _ in range(count):
        text = rnd.choice(bases)
        for _ in range(rnd.randint(1, 3)):
            at = rnd.randint(0, len(text))
            choice = rnd.random()
            if choice < 0.5:
                text = text[:at] + rnd.choice(pieces) + text[at:]
            elif choice < 0.8:
                text = text[:at] + text[at + rnd.randint(1, 4):]
            else:
                lines = text.split("\n")
                lines.insert(rnd.randrange(len(lines)), rnd.choice(lines))
                text = "\n".join(lines)
        out.append(text)
    return out


def test_on_thousands_of_near_miss_documents_the_two_parsers_never_disagree():
    """Whenever the fast path takes a document, strictyaml accepts it and builds the same
    data and lines. (Run offline on 60,000 such documents before this test was written,
    with no disagreement.)"""
    taken = sum(_agree(text) for text in _mutations(seed=22, count=1500))
    assert 100 < taken < 1400  # both paths were exercised


def test_a_suite_that_strictyaml_cannot_read_is_a_problem_not_a_traceback(write_suite):
    # ruamel's round-trip scanner fails on a comment after a key when a later line is
    # blank; the tab keeps the fast path out, so strictyaml is the one reading it.
    path = write_suite("- id: a\n  prompt: #\tnote\n    make a.txt\n\n  checks:\n"
                       "    - type: file_exists\n      path: a.txt\n")
    problems = validate_suite(path)
    assert [(p.line, p.message.startswith("invalid YAML: the parser could not read"))
            for p in problems] == [(1, True)]


def test_a_valid_suite_never_reaches_the_python_validator(write_suite, monkeypatch):
    import jsonschema

    def refuse(*_args, **_kwargs):
        raise AssertionError("the Python validator ran on a valid suite")

    monkeypatch.setattr(jsonschema, "Draft202012Validator", refuse)
    assert len(load_suite(write_suite(MINIMAL * 1 + MINIMAL.replace("one", "two")),
                          use_cache=False).tasks) == 2


def test_an_invalid_suite_is_explained_by_the_python_validator(write_suite, monkeypatch):
    import jsonschema_rs

    calls = []
    real = jsonschema_rs.Draft202012Validator

    def counting(schema):
        calls.append(schema)
        return real(schema)

    monkeypatch.setattr(jsonschema_rs, "Draft202012Validator", counting)
    problems = validate_suite(write_suite(MINIMAL.replace("path: a.txt", "path: 3")))
    assert calls and [(p.line, "expected text, got the number 3" in p.message)
                      for p in problems] == [(5, True)]


def _parses(raw: bytes) -> bool:
    try:
        parse_document(raw.decode("utf-8"), "s.yaml")
    except (YamlSyntaxError, UnicodeDecodeError):
        return False
    return True


@pytest.mark.parametrize("name", sorted(n for n, (raw, _, _) in MALFORMED.items()
                                        if _parses(raw)))
def test_the_compiled_validator_never_calls_valid_what_python_finds_invalid(name):
    """Its "valid" is the only answer trusted; on every corpus case that parses, it must
    not be more lenient than the validator that explains problems."""
    import jsonschema_rs
    from jsonschema import Draft202012Validator

    from evalctl._plugin.registry import get_registry
    from evalctl._suite.schema import registry_schema

    data = parse_document(MALFORMED[name][0].decode("utf-8"), "s.yaml").data
    schema = registry_schema(get_registry())
    python_valid = not list(Draft202012Validator(schema).iter_errors(data))
    assert jsonschema_rs.validator_for(schema).is_valid(data) == python_valid


@pytest.mark.parametrize("pattern", [r"^[a-z]+$", r"^a\$b$", r"^[$]x$", r"^[]$]+$",
                                     r"^[^]$]+$", r"(a|b$)", r"^x\\$", r"^(?!.*\.\.$).+$"])
def test_the_compiled_validator_reads_a_third_party_pattern_as_python_does(pattern):
    """A grader's pattern with `$` (which Python's re also matches before a final
    newline) is given to jsonschema-rs rewritten to match the same texts, so its "valid"
    is never more lenient than the validator that explains problems."""
    import re

    from evalctl._schema_check import surely_valid

    values = {"type": "object", "properties": {"v": {"type": "string", "pattern": pattern}}}
    keys = {"type": "object", "patternProperties": {pattern: {"type": "integer"}}}
    for text in ["abc", "abc\n", "a$b", "a$b\n", "$x", "$x\n", "]$", "]$\n", "b", "b\n",
                 "x\\", "x\\\n", "abc\nd", "a..", "a..\n", ""]:
        python_valid = re.search(pattern, text) is not None
        assert surely_valid({"v": text}, values) == python_valid, text
        assert surely_valid({text: "not an integer"}, keys) == (not python_valid), text
