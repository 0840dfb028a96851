"""A linearizability checker for histories of a key-value register (PUT,
GET, DELETE per key), as the nemesis tests (test_replication.py) record
them, and the lost-write check that goes with it.

A history is a list of `Op`s: each with the time the client invoked it
and the time it completed (`time.monotonic()`), or `complete=None` when
the client cannot know whether it took effect (a timeout, a 5xx, a
connection error). The rules:

- a completed op took effect atomically at one instant between its
  invoke and its completion;
- an op of unknown outcome took effect at any instant after its invoke,
  or never (a GET of unknown outcome observed nothing and is dropped);
- an op that failed with a definite error (`failed=True`: a 4xx other
  than a timeout) never took effect and is dropped.

Keys are independent registers, so each key's history is checked on its
own (linearizability is compositional). The search is Wing & Gong's: take
any op that may come next (one that no pending op finished before),
apply it to the register, recurse; back up when a GET sees a value the
register does not hold. Memoizing (set of linearized ops, register value)
as Lowe does keeps it small: with c clients the sets reachable are about
n * 2^c, not n!. A key whose search passes `max_states` is reported
undecided, never valid.

Two reductions keep unknown outcomes cheap and change no verdict: an
unknown PUT whose value no GET observed is dropped (linearizing it could
only be undone by a later write before any read), and an unknown op is
never required, so a search ends once every completed op is placed.

Values are any hashable; `None` is "absent" (no object). The workload
stores a short digest of each body, so equal values mean equal bytes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Mapping, Optional

PUT, GET, DELETE = "PUT", "GET", "DELETE"
KINDS = (PUT, GET, DELETE)
# Per key: a key of ~60 ops by 8 clients needs some ten thousand states.
DEFAULT_MAX_STATES = 500_000


@dataclass(frozen=True)
class Op:
    """One client call. `value` is what a PUT wrote or what a GET
    observed (None: absent); a DELETE has none."""

    kind: str
    key: str
    invoke: float
    complete: Optional[float]  # None: outcome unknown
    value: Optional[Hashable] = None
    failed: bool = False  # a definite error: it never took effect
    # For an unknown outcome: when the client stopped waiting (None: never
    # known). Only lost_writes uses it.
    gave_up: Optional[float] = None
    process: Any = None  # who called it, for the report
    note: str = ""  # e.g. the error code

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {KINDS}")
        if self.complete is not None and self.complete < self.invoke:
            raise ValueError(f"{self.kind} {self.key!r} completes before it is invoked")

    @property
    def unknown(self) -> bool:
        return self.complete is None and not self.failed

    def show(self, t0: float = 0.0) -> str:
        end = "?" if self.complete is None else f"{self.complete - t0:.3f}"
        what = "" if self.kind == DELETE else f" {'absent' if self.value is None else self.value}"
        flag = " FAILED" if self.failed else ""
        note = f" ({self.note})" if self.note else ""
        who = f"p{self.process}" if isinstance(self.process, int) else self.process
        return f"[{self.invoke - t0:.3f}, {end}] {who} {self.kind} {self.key}{what}{flag}{note}"


@dataclass
class Violation:
    key: str
    message: str
    ops: list[Op]  # the ops involved: the one that could not be placed first

    def describe(self, t0: float = 0.0) -> str:
        lines = [f"key {self.key}: {self.message}"] + [f"    {op.show(t0)}" for op in self.ops]
        return "\n".join(lines)


@dataclass
class Report:
    keys: int = 0
    ops: int = 0
    violations: list[Violation] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)  # keys past the state budget
    t0: float = 0.0  # times in describe() are relative to this

    @property
    def ok(self) -> bool:
        return not self.violations and not self.undecided

    def describe(self, limit: int = 5) -> str:
        head = (f"{self.keys} keys, {self.ops} ops: {len(self.violations)} violations, "
                f"{len(self.undecided)} undecided {self.undecided[:limit]}")
        return "\n".join([head] + [v.describe(self.t0) for v in self.violations[:limit]])


def _apply(op: Op, value: Optional[Hashable]) -> tuple[bool, Optional[Hashable]]:
    """(may take effect now, the register's value after it)."""
    if op.kind == PUT:
        return True, op.value
    if op.kind == DELETE:
        return True, None
    return op.value == value, value


def check_key(key: str, ops: Iterable[Op], max_states: int = DEFAULT_MAX_STATES) -> Optional[Violation] | str:
    """None when the key's history is linearizable, a Violation when it
    is not, the string "undecided" past `max_states`."""
    ops = [o for o in ops if not o.failed and not (o.kind == GET and o.complete is None)]
    observed = {o.value for o in ops if o.kind == GET}
    ops = [o for o in ops if not (o.unknown and o.kind == PUT and o.value not in observed)]
    written = {o.value for o in ops if o.kind == PUT}
    for o in sorted(ops, key=lambda o: o.invoke):
        if o.kind == GET and o.value is not None and o.value not in written:
            return Violation(key, "a GET observed a value no PUT of this key wrote", [o])
    ops.sort(key=lambda o: o.invoke)
    n = len(ops)
    inv = [o.invoke for o in ops]
    comp = [math.inf if o.complete is None else o.complete for o in ops]
    by_completion = sorted(range(n), key=lambda i: comp[i])
    required = sum(1 << i for i in range(n) if ops[i].complete is not None)

    seen: set[tuple[int, Any]] = set()
    # The deepest point reached: (completed ops placed, order, value).
    best: list = [-1, [], None]
    path: list[int] = []
    states = 0

    def search(done: int, value) -> Optional[bool]:
        """True: the rest linearizes; False: it does not; None: budget."""
        nonlocal states
        if done & required == required:
            return True
        if (done, value) in seen:
            return False
        seen.add((done, value))
        states += 1
        if states > max_states:
            return None
        placed = bin(done & required).count("1")
        if placed > best[0]:
            best[:] = [placed, list(path), value]
        # The earliest completion among the ops still pending bounds which
        # may come next: an op invoked after it must wait for it.
        horizon = next(comp[i] for i in by_completion if not done >> i & 1)
        for i in range(n):
            if inv[i] > horizon:
                break  # sorted by invoke: every later op is bounded too
            if done >> i & 1:
                continue
            fits, after = _apply(ops[i], value)
            if not fits:
                continue
            path.append(i)
            res = search(done | 1 << i, after)
            path.pop()
            if res is not False:
                return res
        return False

    result = search(0, None)
    if result is True:
        return None
    if result is None:
        return "undecided"
    placed_ops = [ops[i] for i in best[1]]
    pending = [i for i in range(n) if i not in set(best[1])]
    # The op that could not be placed: the pending completed op that
    # finished first (everything invoked after it had to wait for it).
    stuck = min((i for i in pending if ops[i].complete is not None), key=lambda i: comp[i])
    last_writes = [o for o in placed_ops if o.kind != GET][-2:]
    # Ops concurrent with the stuck one that were not placed either.
    overlapping = [ops[i] for i in pending if i != stuck and inv[i] <= comp[stuck]][:6]
    held = "absent" if best[2] is None else best[2]
    message = (f"not linearizable: after the longest valid prefix ({len(placed_ops)} ops) the register "
               f"holds {held}, and the next op cannot take effect; last writes of that prefix and the "
               f"ops still pending beside it follow")
    return Violation(key, message, [ops[stuck]] + last_writes + overlapping)


def check(history: Iterable[Op], max_states: int = DEFAULT_MAX_STATES) -> Report:
    """Check every key of `history`; violations come in the order of
    their key's first op, so the first is the earliest key to go wrong."""
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history:
        by_key[op.key].append(op)
    report = Report(keys=len(by_key), ops=sum(map(len, by_key.values())))
    report.t0 = min((o.invoke for ops in by_key.values() for o in ops), default=0.0)
    for key in sorted(by_key, key=lambda k: min(o.invoke for o in by_key[k])):
        res = check_key(key, by_key[key], max_states)
        if isinstance(res, Violation):
            report.violations.append(res)
        elif res == "undecided":
            report.undecided.append(key)
    return report


@dataclass
class LostWrite:
    key: str
    write: Op  # the acknowledged PUT that must be there
    observed: Any  # what the final read saw (None: absent)

    def describe(self, t0: float = 0.0) -> str:
        seen = "absent" if self.observed is None else self.observed
        return f"key {self.key}: acknowledged {self.write.show(t0)} but the final read saw {seen}"


def lost_writes(history: Iterable[Op], final: Mapping[str, Any]) -> list[LostWrite]:
    """Acknowledged PUTs that `final` (key -> value read back after the
    workload, None for absent) does not hold.

    A PUT W is checked when it is the last acknowledged write of its key
    beyond doubt: every other acknowledged PUT or DELETE of the key
    completed before W was invoked, and no write of unknown outcome
    overlaps or follows it (invoked after W was, or given up on after W
    was invoked; one without a `gave_up` time counts as following). Then
    the final read must return W's value exactly. Keys missing from
    `final` are not checked (the caller reads back every key it wrote)."""
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history:
        if op.kind != GET and not op.failed:
            by_key[op.key].append(op)
    lost = []
    for key, writes in by_key.items():
        if key not in final:
            continue
        acked = [o for o in writes if o.complete is not None]
        if not acked:
            continue
        last = max(acked, key=lambda o: o.complete)
        if last.kind != PUT:
            continue
        if any(o is not last and o.complete > last.invoke for o in acked):
            continue  # an acknowledged write overlaps it: either may be last
        later_unknown = [o for o in writes if o.unknown and
                         (o.invoke >= last.invoke or o.gave_up is None or o.gave_up > last.invoke)]
        if later_unknown:
            continue
        if final[key] != last.value:
            lost.append(LostWrite(key, last, final[key]))
    return sorted(lost, key=lambda w: w.write.complete)
