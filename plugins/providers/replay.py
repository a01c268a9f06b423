"""The replay provider: answers each model request with the response a recorded run got
for the same request, from that run's cassettes (`RUN_DIR/.cassettes/`).

Deterministic, offline and free, so a live run recorded once replays in every CI build:
a change in the harness, the tools, the suite or a CLI agent that makes the agent ask
something else ends the attempt `replay_mismatch`, an error that names the first field
of the request that differs from the recording. The matching key (model, system, tools,
messages) and the format are evalctl's (`evalctl.Cassette`, docs/cassettes.md); which
recorded exchange answers which request is decided here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import evalctl

REPLAY_MISMATCH = "replay_mismatch"  # an exit status of this provider's: an error
MASKED = "<masked>"


class ReplayProvider:
    """Serves the cassettes of one recorded run (or directory of cassettes). Each request
    is answered by the first exchange of its attempt's cassette, not yet used, whose
    request had the same key (after `mask`); in-order agents get the recording in order,
    and a CLI agent's concurrent side calls find theirs whatever order they come in."""

    def __init__(self, source: str, cassettes: list[evalctl.Cassette], model: str | None,
                 mask: Any = None):
        self.source = source
        self.model = model
        self.mask = mask
        self.by_attempt: dict[tuple[str, int], evalctl.Cassette] = {}
        for cassette in cassettes:
            where = (cassette.task_id, cassette.attempt)
            if where in self.by_attempt:
                raise evalctl.UsageError(
                    f"replay provider: two cassettes for task '{cassette.task_id}' attempt "
                    f"{cassette.attempt}: {self.by_attempt[where].path} and {cassette.path}; "
                    "point it at one run's cassettes")
            self.by_attempt[where] = cassette
        # Per cassette: the (masked) hash of every exchange, and those already served.
        self.hashes = {where: [self._hash(e.key) if mask is not None else e.key_hash
                               for e in c.exchanges]
                       for where, c in self.by_attempt.items()}
        self.used: dict[tuple[str, int], set[int]] = {w: set() for w in self.by_attempt}

    def _masked(self, value: Any) -> Any:
        if self.mask is None:
            return value
        if isinstance(value, str):
            return self.mask.sub(MASKED, value)
        if isinstance(value, Mapping):
            return {k: self._masked(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._masked(v) for v in value]
        return value

    def _hash(self, key: Mapping[str, Any]) -> str:
        return evalctl.Cassette.hash_of(self._masked(key))

    async def complete(self, request: evalctl.ModelRequest) -> evalctl.ModelTurn:
        task_id = str(request.task.get("id", "?"))
        where = (task_id, request.attempt)
        cassette = self.by_attempt.get(where)
        if cassette is None:
            raise evalctl.ProviderError(
                f"replay mismatch: {self.source} has no cassette for task '{task_id}' "
                f"attempt {request.attempt} (recorded: "
                f"{', '.join(sorted(f'{t}#{a}' for t, a in self.by_attempt)) or 'none'})",
                status=REPLAY_MISMATCH)
        try:
            key = evalctl.Cassette.key(request, self.model if self.model is not None
                                       else cassette.model)
            wanted = self._hash(key)
        except RecursionError:  # as the recorder could not keep it: no recording answers
            broken = f" (the recording stopped there: {cassette.broken})" if cassette.broken \
                else ""
            raise evalctl.ProviderError(
                f"replay mismatch: task '{cassette.task_id}' attempt {cassette.attempt} sent a "
                f"request nested too deep to match{broken}", status=REPLAY_MISMATCH) from None
        used = self.used[where]
        hashes = self.hashes[where]
        index = next((i for i, h in enumerate(hashes) if i not in used and h == wanted), None)
        if index is None:
            raise evalctl.ProviderError(self._mismatch(cassette, used, key),
                                        status=REPLAY_MISMATCH)
        used.add(index)
        exchange = cassette.exchanges[index]
        if exchange.turn is None:  # the recorded call failed: it fails the same way
            if exchange.status == evalctl.RequestRejected.RECORDED:
                raise evalctl.RequestRejected(exchange.error)
            # Always provider_error: a provider's own status is replayed as evalctl's,
            # and no recording may make its attempt another kind of error (reading a
            # cassette refuses `executor_error` and the like; a Cassette made in code
            # is held to the same here).
            status = evalctl.ExitStatus.PROVIDER_ERROR
            recorded = f" (recorded as {exchange.status})" if exchange.status != status and \
                exchange.status else ""
            raise evalctl.ProviderError(f"{exchange.error}{recorded}", status=status)
        return exchange.turn

    def _mismatch(self, cassette: evalctl.Cassette, used: set[int],
                  key: Mapping[str, Any]) -> str:
        """Why no recorded exchange answers `key`: the first field where it differs from
        the next one the agent had not yet been served."""
        expected = next((i for i in range(len(cassette.exchanges)) if i not in used), None)
        label = f"task '{cassette.task_id}' attempt {cassette.attempt}"
        if expected is None:
            broken = f"; the recording stopped early: {cassette.broken}" if cassette.broken \
                else ""
            return (f"replay mismatch: {label} made more model requests than the "
                    f"{len(cassette.exchanges)} recorded{broken}")
        difference = evalctl.Cassette.first_difference(
            self._masked(cassette.exchanges[expected].key), self._masked(key))
        return (f"replay mismatch at {difference or 'the request'} (request "
                f"{expected + 1} of {len(cassette.exchanges)} recorded for {label})")


def create(options: Mapping[str, Any]) -> ReplayProvider:
    source = options.get("cassettes")
    if not source:
        raise evalctl.UsageError(
            "the replay provider needs the run to replay: --provider-option "
            "cassettes=RUN_DIR (a run directory of evalctl run, or a directory of cassettes)")
    mask = None
    if options.get("mask"):
        import re2  # google-re2: linear time on whatever text the agent's tools returned

        try:
            mask = re2.compile(str(options["mask"]))
        except re2.error as exc:
            raise evalctl.UsageError(f"replay provider: mask is not a regular expression: "
                                     f"{exc}") from None
    return ReplayProvider(str(source), evalctl.read_cassettes(source), options.get("model"),
                          mask)


@evalctl.hookimpl
def evalctl_register_providers(register):
    register(evalctl.ProviderSpec(
        name="replay",
        create=create,
        description="Replays a recorded run's model exchanges (its cassettes); "
                    "deterministic, offline, free. Options: cassettes=RUN_DIR, model, mask.",
        default_concurrency=8,
        live=False,
        error_statuses=(REPLAY_MISMATCH,),
        options_schema={"type": "object", "properties": {
            "cassettes": {"type": "string", "minLength": 1,
                          "description": "The recorded run: its run directory, a directory "
                                         "of cassettes, or one cassette file."},
            "model": {"type": "string", "minLength": 1,
                      "description": "The model the built-in loop's requests name (also "
                                     "--model); default: the recorded run's."},
            "mask": {"type": "string", "minLength": 1,
                     "description": "An RE2 regular expression: what it matches in a "
                                    "request (times, absolute paths) is not compared."},
        }},
    ))
