"""The proxy's fault plan decides which events are hit; these pin its schedule semantics.

No sockets: the plan is pure, so "the 3rd and 10th", "every 500th", seeded probabilities and
rule precedence are checked by feeding it events directly.
"""

from __future__ import annotations

import pytest

from support.faults import PRODUCE_API_KEY, FaultPlan, Schedule

METADATA_API_KEY = 3


def hits_of(plan: FaultPlan, events: int, api_key: int = PRODUCE_API_KEY) -> list[int]:
    """Ordinals (1-based) of the responses the plan drops among ``events`` responses."""
    return [n for n in range(1, events + 1) if plan.on_response(api_key).drop]


def test_nth_hits_exactly_the_listed_ordinals_then_the_rule_is_exhausted() -> None:
    plan = FaultPlan()
    rule = plan.drop_produce_response(nth=[3, 10])
    assert hits_of(plan, 20) == [3, 10]
    assert (rule.seen, rule.hits, rule.exhausted) == (10, 2, True)


def test_every_with_times_cap() -> None:
    plan = FaultPlan()
    rule = plan.reset_on_produce_request(every=500, times=2)
    resets = [n for n in range(1, 2001) if plan.on_request(PRODUCE_API_KEY).reset]
    assert resets == [500, 1000]
    assert rule.hits == 2 and rule.exhausted


def test_no_selector_means_the_next_events_up_to_times() -> None:
    plan = FaultPlan()
    plan.drop_produce_response(times=1)
    assert hits_of(plan, 5) == [1]


def test_ordinals_count_from_when_the_rule_was_added() -> None:
    plan = FaultPlan()
    assert hits_of(plan, 7) == []  # warm-up traffic before any rule
    plan.drop_produce_response(nth=[2])
    assert hits_of(plan, 5) == [2]


def test_only_produce_requests_are_observed_by_reset_rules() -> None:
    plan = FaultPlan()
    rule = plan.reset_on_produce_request(times=1)
    assert not plan.on_request(METADATA_API_KEY).reset
    assert rule.seen == 0
    assert plan.on_request(PRODUCE_API_KEY).reset


def test_probability_is_reproducible_from_the_seed() -> None:
    def run(seed: int) -> list[int]:
        plan = FaultPlan(seed)
        plan.drop_produce_response(probability=0.3)
        return hits_of(plan, 300)

    first = run(7)
    assert first == run(7)
    assert first != run(8)  # 300 draws: equal sequences would mean the seed is ignored
    assert 40 < len(first) < 140  # ~90 expected; bounds far outside any plausible draw


def test_another_rule_does_not_shift_a_rules_random_draws() -> None:
    alone = FaultPlan(3)
    alone_rule = alone.stall_responses(1.0, probability=0.5)
    shared = FaultPlan(3)
    shared_rule = shared.stall_responses(1.0, probability=0.5)
    shared.rewrite_produce_responses(lambda response, version: None, probability=0.5)
    pattern_alone = [alone.on_response(PRODUCE_API_KEY).stall_seconds for _ in range(100)]
    pattern_shared = [shared.on_response(PRODUCE_API_KEY).stall_seconds for _ in range(100)]
    assert pattern_alone == pattern_shared
    assert alone_rule.hits == shared_rule.hits > 0


def test_a_dropped_response_is_seen_by_no_other_rule() -> None:
    plan = FaultPlan()
    plan.drop_produce_response(nth=[1])
    stall = plan.stall_responses(2.0, nth=[1])
    first = plan.on_response(PRODUCE_API_KEY)
    second = plan.on_response(PRODUCE_API_KEY)
    assert first.drop and first.stall_seconds == 0.0
    # The stall rule's 1st observed response is the broker's 2nd one.
    assert not second.drop and second.stall_seconds == 2.0
    assert stall.hits == 1


def test_stall_targets_its_api_key_or_every_api() -> None:
    plan = FaultPlan()
    produce_only = plan.stall_responses(1.0)
    any_api = plan.stall_responses(0.5, api_key=None)
    assert plan.on_response(METADATA_API_KEY).stall_seconds == 0.5
    assert plan.on_response(PRODUCE_API_KEY).stall_seconds == 1.5
    assert (produce_only.seen, any_api.seen) == (1, 2)


def test_rewrites_apply_to_produce_only_in_rule_order() -> None:
    plan = FaultPlan()

    def first(response: object, version: int) -> None:
        return None

    def second(response: object, version: int) -> None:
        return None

    plan.rewrite_produce_responses(first)
    plan.rewrite_produce_responses(second)
    assert plan.on_response(PRODUCE_API_KEY).rewrites == (first, second)
    assert plan.on_response(METADATA_API_KEY).rewrites == ()


def test_rtt_applies_to_every_decision_and_clear_restores_a_plain_pipe() -> None:
    plan = FaultPlan()
    plan.rtt_ms = 250
    plan.drop_produce_response()
    assert plan.on_response(METADATA_API_KEY).delay_seconds == 0.25
    assert plan.on_response(PRODUCE_API_KEY).drop
    plan.clear()
    decision = plan.on_response(PRODUCE_API_KEY)
    assert not decision.drop and decision.delay_seconds == 0.0
    assert plan.rules == ()


def test_removed_rule_stops_applying() -> None:
    plan = FaultPlan()
    rule = plan.drop_produce_response()
    assert plan.on_response(PRODUCE_API_KEY).drop
    plan.remove(rule)
    assert not plan.on_response(PRODUCE_API_KEY).drop
    assert rule.hits == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"nth": frozenset({0})},
        {"every": 0},
        {"probability": 1.5},
        {"probability": -0.1},
        {"times": -1},
    ],
)
def test_invalid_schedules_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Schedule(**kwargs)  # type: ignore[arg-type]


def test_invalid_rtt_and_stall_are_refused() -> None:
    plan = FaultPlan()
    with pytest.raises(ValueError, match="rtt_ms"):
        plan.rtt_ms = -1
    with pytest.raises(ValueError, match="seconds"):
        plan.stall_responses(-1.0)


def test_repr_names_rules_and_counts() -> None:
    plan = FaultPlan(seed=42)
    plan.drop_produce_response(nth=[3, 10])
    plan.on_response(PRODUCE_API_KEY)
    text = repr(plan)
    assert "seed=42" in text and "drop_produce_response" in text
    assert "nth=[3, 10]" in text and "seen=1 hits=0" in text
