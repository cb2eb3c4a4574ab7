"""REINFORCE over the masked-attention policy: its gradients, its sampler and what it learns.

The strategy contract (seeding, state round trip, failures, asynchronous use) is in
``test_strategy_contract.py``; these are the properties only this strategy promises.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ultron.algorithms.policy import AttentionPolicy, log_softmax
from ultron.algorithms.reinforce import ReinforceSearch
from ultron.algorithms.space import Choice, SearchSpace, canonical


def _objective(
    policy: AttentionPolicy, batch: list[list[int]], weights: list[float], beta: float
) -> float:
    """What ``gradient`` differentiates, computed from the forward pass alone."""
    total = 0.0
    for indices, weight in zip(batch, weights, strict=True):
        total += weight * policy.log_prob(indices)
        for logp in policy.path(indices):
            total -= beta * float(np.exp(logp) @ logp)
    return total


@pytest.mark.parametrize(
    "batch",
    [[[0, 1, 1], [2, 3, 0]], [[0, -1, 1], [2, 3, 0]]],
    ids=["all-active", "one-inactive"],  # -1: a choice a condition switched off
)
def test_the_hand_written_gradient_matches_finite_differences(batch: list[list[int]]) -> None:
    rng = np.random.default_rng(0)
    policy = AttentionPolicy([3, 4, 2], dim=5, rng=rng, learning_rate=0.1)
    for d, size in enumerate(policy.sizes):  # leave the all-zero start, where most grads vanish
        policy.params["out"][d] = rng.normal(0.0, 1.0, (size, 5))
        policy.params["bias"][d] = rng.normal(0.0, 1.0, size)
    weights, beta = [0.7, -1.3], 0.3
    grads, _ = policy.gradient(batch, weights, beta)
    for name in ("wk", "wv", "null"):
        param, grad = policy.params[name], grads[name]
        for index in [(0,) * param.ndim, tuple(s - 1 for s in param.shape)]:
            old = param[index]
            param[index] = old + 1e-6
            up = _objective(policy, batch, weights, beta)
            param[index] = old - 1e-6
            down = _objective(policy, batch, weights, beta)
            param[index] = old
            assert (up - down) / 2e-6 == pytest.approx(grad[index], abs=1e-6)
    for name in ("content", "query", "out"):
        param, grad = policy.params[name][2], grads[name][2]
        index = (0,) * param.ndim
        old = param[index]
        param[index] = old + 1e-6
        up = _objective(policy, batch, weights, beta)
        param[index] = old - 1e-6
        down = _objective(policy, batch, weights, beta)
        param[index] = old
        assert (up - down) / 2e-6 == pytest.approx(grad[index], abs=1e-6)


def test_log_softmax_is_stable_for_huge_logits() -> None:
    logp = log_softmax(np.array([1e300, 0.0, -1e300]))
    assert np.isfinite(logp[:2]).all()
    assert logp[0] == 0.0


def test_the_first_batch_is_uniform_and_the_policy_sums_to_one() -> None:
    space = SearchSpace({"a": Choice((1, 2, 3)), "b": Choice(("x", "y"))})
    algo = ReinforceSearch(space, seed=0)
    configs = space.grid()
    probabilities = [algo.probabilities(c) for c in configs]
    assert probabilities == pytest.approx([1 / 6] * 6)
    algo.update_state(configs, [float(i) for i in range(6)])  # fewer than batch_size: no update
    assert sum(algo.probabilities(c) for c in configs) == pytest.approx(1.0)


def test_no_configuration_is_proposed_twice_and_an_exhausted_space_gives_none() -> None:
    space = SearchSpace({"a": Choice((1, 2, 3)), "b": Choice((1, 2, 3, 4))})
    algo = ReinforceSearch(space, seed=1, batch_size=2)
    proposed: list[str] = []
    while batch := algo.sample_hyperparameter_candidates(5):
        proposed += [canonical(c) for c in batch]
        # a sharp reward so the policy concentrates and would repeat itself if it could
        algo.update_state(batch, [10.0 * (c["a"] == 1 and c["b"] == 1) for c in batch])
    assert len(proposed) == len(set(proposed)) == 12
    assert algo.sample_hyperparameter_candidates(3) == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_first_batch_tries_every_value_of_every_choice(seed: int) -> None:
    """The balanced initial design: 8 draws cover a 5-valued choice's values, 1 or 2 times each
    (random draws of 8 miss a given value with probability 0.8**8 = 17%)."""
    space = SearchSpace({f"e{i}": Choice(tuple(range(5))) for i in range(6)})
    batch = ReinforceSearch(space, seed=seed, warmup=8).sample_hyperparameter_candidates(8)
    for name in space:
        counts = np.bincount([c[name] for c in batch], minlength=5)
        assert counts.min() >= 1 and counts.max() <= 2, (name, counts)
    assert len({canonical(c) for c in batch}) == 8


def test_the_initial_design_survives_a_state_round_trip() -> None:
    space = SearchSpace({f"e{i}": Choice(tuple(range(5))) for i in range(3)})
    algo = ReinforceSearch(space, seed=4, warmup=8)
    first = algo.sample_hyperparameter_candidates(3)
    clone = ReinforceSearch(space, seed=99, warmup=8)
    clone.load_state_dict(algo.state_dict())
    assert clone.sample_hyperparameter_candidates(5) == algo.sample_hyperparameter_candidates(5)
    assert first  # the design's first three were taken before the round trip


def test_only_the_ranks_of_the_scores_matter() -> None:
    """Reward normalization: a monotone rescaling of the objective changes nothing."""
    space = SearchSpace({f"x{i}": Choice(tuple(range(4))) for i in range(3)})

    def proposals(transform) -> list[str]:
        algo = ReinforceSearch(space, seed=5)
        out = []
        for _ in range(4):
            batch = algo.sample_hyperparameter_candidates(8)
            out += [canonical(c) for c in batch]
            algo.update_state(batch, [transform(sum(c.values())) for c in batch])
        return out

    assert proposals(float) == proposals(lambda s: 1e12 * s - 7.0)
    assert proposals(float) != proposals(lambda s: -float(s))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_masked_attention_can_express_a_dependence_between_choices(seed: int) -> None:
    """``b`` must equal ``a``: no product of independent marginals puts more than 1/5 on the
    diagonal; the attention of ``b`` over the content of ``a`` can put nearly all of it."""
    policy = AttentionPolicy([5, 5], dim=16, rng=np.random.default_rng(seed), learning_rate=0.05)
    diagonal = [[k, k] for k in range(5)]
    for _ in range(150):
        grads, _ = policy.gradient(diagonal, [1 / 5] * 5, entropy_weight=0.0)
        policy.ascend(grads)
    assert sum(math.exp(policy.log_prob(x)) for x in diagonal) > 0.9


def test_reinforce_concentrates_on_the_best_region() -> None:
    space = SearchSpace({f"x{i}": Choice(tuple(range(5))) for i in range(4)})
    algo = ReinforceSearch(space, seed=0, direction="maximize")
    found = []
    for _ in range(8):
        batch = algo.sample_hyperparameter_candidates(8)
        found += batch
        algo.update_state(batch, [float(sum(c.values())) for c in batch])
    late = found[-16:]
    # the optimum (4, 4, 4, 4) sums to 16; uniform draws average 8 (the mean of 16: ± 0.7)
    assert np.mean([sum(c.values()) for c in late]) > 10


def test_numeric_domains_are_sliced_and_failures_are_tolerated() -> None:
    from ultron.algorithms.space import LogUniform

    space = SearchSpace({"lr": LogUniform(1e-5, 1.0), "act": Choice(("relu", "tanh"))})
    # a design of one batch: the test is about what the policy learns in the five after it
    algo = ReinforceSearch(space, seed=3, bins=5, batch_size=4, warmup=4)
    for _ in range(6):
        batch = algo.sample_hyperparameter_candidates(4)
        assert all(space.contains(c) for c in batch)
        scores = [math.nan if i == 0 else abs(math.log10(c["lr"]) + 2) for i, c in enumerate(batch)]
        algo.update_state(batch, scores)
    # lr near 1e-2 is best: the slice holding it now outweighs a uniform slice
    assert (
        algo.probabilities({"lr": 1e-2, "act": "relu"})
        + algo.probabilities({"lr": 1e-2, "act": "tanh"})
        > 1 / 5
    )


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("learning_rate", 0.0),
        ("bins", 1),
        ("baseline_decay", 1.0),
        ("target_kl", -1.0),
        ("warmup", -1),
    ],
)
def test_an_out_of_range_option_is_named_with_its_value_and_rule(option: str, value: float) -> None:
    space = SearchSpace({"a": Choice((1, 2))})
    with pytest.raises(ValueError, match=rf"reinforce option {option} is {value!r}; it must be"):
        ReinforceSearch(space, **{option: value})
    with pytest.raises(ValueError, match=option):
        ReinforceSearch.check_options(**{option: value})
