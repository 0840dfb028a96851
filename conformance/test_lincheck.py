"""The history checker of the nemesis tests (lincheck.py) on hand-made
histories; no server. Times are plain numbers (the checker only compares
them)."""

from __future__ import annotations

import random

from lincheck import DELETE, GET, PUT, Op, check, check_key, lost_writes


def put(key, value, invoke, complete, p=0, **kw):
    return Op(PUT, key, invoke, complete, value, process=p, **kw)


def get(key, value, invoke, complete, p=0, **kw):
    return Op(GET, key, invoke, complete, value, process=p, **kw)


def delete(key, invoke, complete, p=0, **kw):
    return Op(DELETE, key, invoke, complete, process=p, **kw)


def verdict(history):
    report = check(history)
    assert not report.undecided, report.describe()
    return report


def test_sequential_history_passes():
    h = [put("k", "a", 0, 1), get("k", "a", 2, 3), put("k", "b", 4, 5), get("k", "b", 6, 7)]
    assert verdict(h).ok


def test_get_absent_before_any_write():
    assert verdict([get("k", None, 0, 1), put("k", "a", 2, 3), get("k", "a", 4, 5)]).ok
    # ...but not after a write was acknowledged.
    report = verdict([put("k", "a", 0, 1), get("k", None, 2, 3)])
    assert len(report.violations) == 1


def test_delete_then_get_absent():
    h = [put("k", "a", 0, 1), delete("k", 2, 3), get("k", None, 4, 5), put("k", "b", 6, 7), get("k", "b", 8, 9)]
    assert verdict(h).ok


def test_get_after_delete_seeing_the_deleted_value_fails():
    report = verdict([put("k", "a", 0, 1), delete("k", 2, 3), get("k", "a", 4, 5)])
    assert [v.key for v in report.violations] == ["k"]
    assert report.violations[0].ops[0].kind == GET


def test_concurrent_reads_may_see_either_side_of_an_overlapping_write():
    # PUT b spans [2, 10]; reads inside it see a or b, but once one read has
    # seen b, a read that begins after that one ended must not see a.
    h = [put("k", "a", 0, 1, p=1), put("k", "b", 2, 10, p=1),
         get("k", "a", 3, 4, p=2), get("k", "b", 5, 6, p=3), get("k", "b", 7, 8, p=2)]
    assert verdict(h).ok
    h2 = h[:4] + [get("k", "a", 7, 8, p=2)]
    assert len(verdict(h2).violations) == 1


def test_two_overlapping_writes_may_land_in_either_order():
    for final in ("x", "y"):
        h = [put("k", "x", 0, 5, p=1), put("k", "y", 1, 4, p=2), get("k", final, 6, 7, p=3)]
        assert verdict(h).ok, final


def test_stale_read_after_an_acknowledged_put_fails():
    h = [put("k", "old", 0, 1, p=1), put("k", "new", 2, 3, p=1), get("k", "old", 4, 5, p=2)]
    report = verdict(h)
    assert len(report.violations) == 1
    v = report.violations[0]
    stuck = v.ops[0]
    assert (stuck.kind, stuck.value) == (GET, "old"), v.describe()
    assert any(o.kind == PUT and o.value == "new" for o in v.ops), v.describe()
    assert "new" in v.message
    assert "p2 GET k old" in report.describe()


def test_read_of_a_value_never_written_fails():
    report = verdict([put("k", "a", 0, 1), get("k", "zzz", 2, 3)])
    assert len(report.violations) == 1
    assert "no PUT of this key wrote" in report.violations[0].message
    # A value written only to another key does not count.
    report = verdict([put("j", "zzz", 0, 1), get("k", "zzz", 2, 3)])
    assert [v.key for v in report.violations] == ["k"]


def test_unknown_outcome_put_may_take_effect():
    # The PUT timed out (complete None); a later read sees it.
    h = [put("k", "a", 0, 1), put("k", "b", 2, None, note="ReadTimeout"), get("k", "b", 10, 11)]
    assert verdict(h).ok


def test_unknown_outcome_put_may_never_take_effect():
    h = [put("k", "a", 0, 1), put("k", "b", 2, None, note="503"), get("k", "a", 10, 11), get("k", "a", 12, 13)]
    assert verdict(h).ok


def test_unknown_outcome_put_may_take_effect_late_but_only_once():
    # It may land after a later acknowledged write...
    h = [put("k", "b", 0, None), put("k", "c", 5, 6), get("k", "b", 7, 8)]
    assert verdict(h).ok
    # ...but once the register has moved on from it, it cannot come back.
    h = [put("k", "b", 0, None), get("k", "b", 1, 2), put("k", "c", 3, 4), get("k", "b", 5, 6)]
    assert len(verdict(h).violations) == 1


def test_unknown_outcome_put_cannot_take_effect_before_its_invoke():
    h = [put("k", "a", 0, 1), get("k", "b", 2, 3), put("k", "b", 4, None)]
    assert len(verdict(h).violations) == 1


def test_unknown_outcome_delete_both_ways():
    base = [put("k", "a", 0, 1), delete("k", 2, None, note="ConnectionClosedError")]
    assert verdict(base + [get("k", None, 5, 6)]).ok
    assert verdict(base + [get("k", "a", 5, 6)]).ok
    # Not both: absent, then a again, with no write between.
    assert len(verdict(base + [get("k", None, 5, 6), get("k", "a", 7, 8)]).violations) == 1


def test_a_definite_failure_never_takes_effect():
    h = [put("k", "a", 0, 1), put("k", "b", 2, 3, failed=True, note="AccessDenied"), get("k", "b", 4, 5)]
    # b was written only by a failed PUT: as good as never written.
    assert len(verdict(h).violations) == 1
    h = [put("k", "a", 0, 1), delete("k", 2, 3, failed=True), get("k", "a", 4, 5)]
    assert verdict(h).ok


def test_a_get_of_unknown_outcome_constrains_nothing():
    h = [put("k", "a", 0, 1), get("k", None, 2, None, note="ReadTimeout"), get("k", "a", 3, 4)]
    assert verdict(h).ok


def test_keys_are_checked_independently_and_the_first_violation_comes_first():
    h = [put("b", "1", 0, 1), get("b", None, 2, 3),  # b goes wrong at 2
         put("a", "1", 5, 6), get("a", None, 7, 8),  # a goes wrong later
         put("c", "1", 0, 1), get("c", "1", 2, 3)]
    report = verdict(h)
    assert [v.key for v in report.violations] == ["b", "a"]
    assert report.keys == 3 and report.ops == 6


def test_lost_acknowledged_write():
    h = [put("k", "a", 0, 1), put("k", "b", 2, 3)]
    assert lost_writes(h, {"k": "b"}) == []
    lost = lost_writes(h, {"k": "a"})
    assert [(w.key, w.write.value, w.observed) for w in lost] == [("k", "b", "a")]
    assert [w.key for w in lost_writes(h, {"k": None})] == ["k"]
    # The final read as one more op: lincheck flags it too.
    assert len(verdict(h + [get("k", "a", 10, 11)]).violations) == 1


def test_lost_writes_leaves_out_keys_whose_last_write_is_in_doubt():
    # Last acknowledged write is a DELETE: nothing to read back.
    assert lost_writes([put("k", "a", 0, 1), delete("k", 2, 3)], {"k": None}) == []
    # An unknown-outcome write after it may have replaced it.
    h = [put("k", "a", 0, 1), put("k", "b", 2, None)]
    assert lost_writes(h, {"k": "b"}) == [] and lost_writes(h, {"k": "a"}) == []
    h = [put("k", "a", 0, 1), delete("k", 2, None)]
    assert lost_writes(h, {"k": None}) == []
    # An unknown write the client gave up on before `a` began does not count.
    h = [put("k", "x", 0, None, gave_up=0.5), put("k", "a", 1, 2)]
    assert [w.observed for w in lost_writes(h, {"k": "x"})] == ["x"]
    # Two overlapping acknowledged PUTs: either may be last.
    h = [put("k", "a", 0, 5, p=1), put("k", "b", 1, 4, p=2)]
    assert lost_writes(h, {"k": "a"}) == [] and lost_writes(h, {"k": "b"}) == []
    # A failed PUT is no write at all.
    h = [put("k", "a", 0, 1), put("k", "b", 2, 3, failed=True)]
    assert [w.write.value for w in lost_writes(h, {"k": "b"})] == ["a"]
    # Keys not read back are not judged.
    assert lost_writes([put("k", "a", 0, 1)], {}) == []


def simulate(seed: int, clients: int = 6, ops: int = 60, stale: bool = False) -> list[Op]:
    """A history of one key from a real (atomic) register: each op takes
    effect at a random instant of its window. With `stale`, one GET reports
    the value before the last write it saw take effect."""
    rng = random.Random(seed)
    events = []  # (effect time, op without its result yet)
    t = [0.0] * clients
    for n in range(ops):
        c = rng.randrange(clients)
        start = t[c] + rng.random()
        end = start + rng.random() * 3
        kind = rng.choice([PUT, PUT, GET, GET, GET, DELETE])
        events.append((start + rng.random() * (end - start), kind, start, end, c, f"v{n}"))
        t[c] = end
    events.sort()
    value, history = None, []
    for effect, kind, start, end, c, v in events:
        if kind == PUT:
            value = v
            history.append(put("k", v, start, end, p=c))
        elif kind == DELETE:
            value = None
            history.append(delete("k", start, end, p=c))
        else:
            history.append(get("k", value, start, end, p=c))
    if stale:
        # A read after everything that sees a PUT which a later write
        # followed in real time: that PUT cannot be the last one.
        end = max(o.complete for o in history)
        writes = [o for o in history if o.kind != GET]
        old = next(o for o in writes if o.kind == PUT and any(w.invoke > o.complete for w in writes))
        history.append(get("k", old.value, end + 1, end + 2, p=0))
    return history


def test_simulated_atomic_registers_pass_quickly():
    for seed in range(20):
        assert check_key("k", simulate(seed)) is None, seed
    # Behaviour, not timing: a 60-op key with six clients stays well inside
    # the state budget (undecided would be a string).
    assert all(check_key("k", simulate(seed, clients=8, ops=64), max_states=200_000) is None for seed in range(5))


def test_a_simulated_register_with_a_bad_read_fails():
    for seed in range(5):
        res = check_key("k", simulate(seed, stale=True))
        assert res is not None and res != "undecided", seed
        assert res.ops[0].kind == GET and "no PUT" not in res.message, res.describe()
