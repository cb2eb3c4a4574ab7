"""A masked-attention autoregressive policy over categorical choices, in numpy (for REINFORCE).

The policy of ReMAADE (Krishna et al. 2020, arXiv 2006.00939): the probability of a
configuration factorizes as ``π(x) = Π_d π(x_d | x_<d)`` and each conditional is computed by one
attention block whose mask lets choice ``d`` see only the choices before it. As in the paper's
simplified two-stream Transformer (after XLNet), there is

- a *content stream*: token ``t_j = C_j[x_j] + P_j``, the embedding of the value chosen for
  hyper-parameter ``j`` plus an embedding of ``j`` itself;
- a *query stream*: hyper-parameter ``d`` asks with a learned query ``Q_d`` that knows its
  position but not its own value, attends over the content tokens of ``j < d`` (and a learned
  null token, so the first choice and "nothing before matters" are expressible), and reads
  ``z_d = Q_d + Σ_j a_dj W_v t_j`` with ``a_d = softmax(Q_d · W_k t_j / sqrt(E))``;
- a head per hyper-parameter: ``logits_d = O_d z_d + b_d``.

No layer norm and no positional encoding beyond ``P_j``, as the paper's parsimonious block. The
output weights start at zero, so the first batch is drawn uniformly (pure random search) and
the policy only departs from uniform as rewards come in.

Conditional spaces: a choice may be *inactive* (category index ``-1``; SGD's momentum under
Adam). It is not drawn, adds nothing to ``log π(x)`` and has no content token, so the choices
after it attend only over the active ones: ``π(x) = Π_{d active} π(x_d | x_<d active)``. Which
choice is active is decided by the caller from the prefix (:meth:`AttentionPolicy.sample`).

Numerics: log-probabilities through log-sum-exp, gradients by hand (one block, so backprop is
a few lines per choice), Adam with a global gradient-norm clip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["AttentionPolicy", "log_softmax"]

_SHARED = ("null", "wk", "wv")
_PER_CHOICE = ("content", "position", "query", "out", "bias")
_ADAM_BETAS = (0.9, 0.999)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """``logits - logsumexp(logits)``, stable for any magnitude."""
    shifted = logits - logits.max()
    return np.asarray(shifted - math.log(float(np.exp(shifted).sum())))


class AttentionPolicy:
    """The autoregressive policy, its gradients and its Adam optimizer.

    Args:
        sizes: how many categories each choice has, in factorization order.
        dim: width ``E`` of the embeddings.
        rng: draws the initial embeddings (the policy keeps no generator of its own).
        learning_rate: Adam's step size.
        clip: the largest global gradient norm a step uses.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        *,
        dim: int,
        rng: np.random.Generator,
        learning_rate: float,
        clip: float = 5.0,
    ) -> None:
        self.sizes = [int(k) for k in sizes]
        self.dim = dim
        self.learning_rate = learning_rate
        self.clip = clip
        scale = 1.0 / math.sqrt(dim)
        self.params: dict[str, Any] = {
            "null": rng.normal(0.0, scale, dim),
            "wk": rng.normal(0.0, scale, (dim, dim)),
            "wv": rng.normal(0.0, scale, (dim, dim)),
            "content": [rng.normal(0.0, scale, (k, dim)) for k in self.sizes],
            "position": [rng.normal(0.0, scale, dim) for _ in self.sizes],
            "query": [rng.normal(0.0, scale, dim) for _ in self.sizes],
            "out": [np.zeros((k, dim)) for k in self.sizes],
            "bias": [np.zeros(k) for k in self.sizes],
        }
        self._moments = [self._zeros(), self._zeros()]
        self._steps = 0

    def _zeros(self) -> dict[str, Any]:
        return {
            name: [np.zeros_like(p) for p in value]
            if isinstance(value, list)
            else np.zeros_like(value)
            for name, value in self.params.items()
        }

    # -- forward ---------------------------------------------------------------------------

    def _attend(
        self, d: int, tokens: Sequence[np.ndarray | None]
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Logits of choice ``d`` given the content tokens of the active choices before it."""
        p = self.params
        used = [j for j in range(d) if tokens[j] is not None]
        stacked = np.vstack(
            [p["null"], *(np.asarray(tokens[j]) for j in used)]
        )  # (active before + 1, E)
        keys, values = stacked @ p["wk"].T, stacked @ p["wv"].T
        query = p["query"][d]
        scores = keys @ query / math.sqrt(self.dim)
        weights = np.exp(log_softmax(scores))
        z = query + weights @ values
        logits = p["out"][d] @ z + p["bias"][d]
        cache = {
            "stacked": stacked,
            "keys": keys,
            "values": values,
            "weights": weights,
            "z": z,
            "used": used,
        }
        return logits, cache

    def _token(self, d: int, k: int) -> np.ndarray | None:
        if k < 0:  # an inactive choice has no token
            return None
        return np.asarray(self.params["content"][d][k] + self.params["position"][d])

    def sample(
        self,
        rng: np.random.Generator,
        active: Callable[[int, list[int]], bool] | None = None,
    ) -> list[int]:
        """Draw one configuration, choice by choice (ancestral sampling).

        Args:
            rng: the caller's generator.
            active: whether choice ``d`` is active given the indices before it; an inactive
                one is not drawn and gets index ``-1``. ``None``: every choice is active.
        """
        tokens: list[np.ndarray | None] = []
        indices: list[int] = []
        for d in range(len(self.sizes)):
            if active is not None and not active(d, indices):
                indices.append(-1)
                tokens.append(None)
                continue
            logits, _ = self._attend(d, tokens)
            probs = np.exp(log_softmax(logits))
            k = int(rng.choice(len(probs), p=probs / probs.sum()))
            indices.append(k)
            tokens.append(self._token(d, k))
        return indices

    def next_log_probs(self, prefix: Sequence[int]) -> np.ndarray:
        """``log π(· | x_<d = prefix)``: the distribution of the next choice."""
        tokens = [self._token(d, k) for d, k in enumerate(prefix)]
        return log_softmax(self._attend(len(prefix), tokens)[0])

    def conditionals(self, indices: Sequence[int]) -> np.ndarray:
        """``log π(x_d | x_<d)`` for every ``d``; their sum is ``log π(x)``."""
        tokens = [self._token(d, k) for d, k in enumerate(indices)]
        return np.array(
            [
                float(log_softmax(self._attend(d, tokens)[0])[k]) if k >= 0 else 0.0
                for d, k in enumerate(indices)
            ]
        )

    def path(self, indices: Sequence[int]) -> list[np.ndarray]:
        """``log π(· | x_<d)`` for every active ``d``: the conditionals along one
        configuration."""
        tokens = [self._token(d, k) for d, k in enumerate(indices)]
        return [log_softmax(self._attend(d, tokens)[0]) for d, k in enumerate(indices) if k >= 0]

    def log_prob(self, indices: Sequence[int]) -> float:
        """``log π(x)`` of one configuration given as category indices."""
        return float(self.conditionals(indices).sum())

    # -- backward --------------------------------------------------------------------------

    def gradient(
        self, batch: Sequence[Sequence[int]], weights: Sequence[float], entropy_weight: float
    ) -> tuple[dict[str, Any], float]:
        """Gradient of ``Σ_i w_i log π(x_i) + β Σ_i Σ_d H(π(· | x_<d))``, and the mean entropy.

        The entropy term is the entropy of each conditional along the sampled paths (as NAS
        controllers since Zoph & Le regularize it): exact per choice, cheap, and it keeps every
        category reachable.
        """
        grads = self._zeros()
        entropy = 0.0
        for indices, weight in zip(batch, weights, strict=True):
            tokens = [self._token(d, k) for d, k in enumerate(indices)]
            token_grads = [np.zeros(self.dim) for _ in indices]
            for d, k in enumerate(indices):
                if k < 0:
                    continue
                logits, cache = self._attend(d, tokens)
                logp = log_softmax(logits)
                probs = np.exp(logp)
                h = -float(probs @ logp)
                entropy += h
                g = -weight * probs
                g[k] += weight  # d log softmax_k / d logits
                g += entropy_weight * (-probs * (logp + h))  # d H / d logits
                self._backward(d, g, cache, grads, token_grads)
            for d, k in enumerate(indices):
                if k < 0:
                    continue
                grads["content"][d][k] += token_grads[d]
                grads["position"][d] += token_grads[d]
        return grads, entropy / max(len(batch), 1)

    def _backward(
        self,
        d: int,
        g: np.ndarray,
        cache: dict[str, Any],
        grads: dict[str, Any],
        token_grads: list[np.ndarray],
    ) -> None:
        p = self.params
        grads["out"][d] += np.outer(g, cache["z"])
        grads["bias"][d] += g
        dz = p["out"][d].T @ g
        weights, values, keys = cache["weights"], cache["values"], cache["keys"]
        dweights = values @ dz
        dscores = weights * (dweights - weights @ dweights)
        grads["query"][d] += dz + keys.T @ dscores / math.sqrt(self.dim)
        dkeys = np.outer(dscores, p["query"][d]) / math.sqrt(self.dim)
        dvalues = np.outer(weights, dz)
        grads["wk"] += dkeys.T @ cache["stacked"]
        grads["wv"] += dvalues.T @ cache["stacked"]
        dstacked = dkeys @ p["wk"] + dvalues @ p["wv"]
        grads["null"] += dstacked[0]
        for row, j in enumerate(cache["used"]):
            token_grads[j] += dstacked[1 + row]

    def ascend(self, grads: dict[str, Any]) -> None:
        """One Adam step *up* the gradient, its global norm clipped to ``clip``."""
        flat = list(_leaves(grads))
        norm = math.sqrt(sum(float((g * g).sum()) for g in flat))
        scale = min(1.0, self.clip / norm) if norm > 0 else 1.0
        self._steps += 1
        b1, b2 = _ADAM_BETAS
        correction = math.sqrt(1 - b2**self._steps) / (1 - b1**self._steps)
        for param, grad, m, v in zip(
            _leaves(self.params),
            flat,
            _leaves(self._moments[0]),
            _leaves(self._moments[1]),
            strict=True,
        ):
            grad = grad * scale
            m *= b1
            m += (1 - b1) * grad
            v *= b2
            v += (1 - b2) * grad * grad
            param += self.learning_rate * correction * m / (np.sqrt(v) + 1e-8)

    # -- state -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Parameters and optimizer moments as JSON-compatible lists."""
        return {
            "params": _to_lists(self.params),
            "first": _to_lists(self._moments[0]),
            "second": _to_lists(self._moments[1]),
            "steps": self._steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (same ``sizes`` and ``dim``)."""
        self.params = _from_lists(state["params"], self.params)
        self._moments = [
            _from_lists(state["first"], self.params),
            _from_lists(state["second"], self.params),
        ]
        self._steps = int(state["steps"])


def _leaves(tree: dict[str, Any]) -> Any:
    for name in (*_SHARED, *_PER_CHOICE):
        value = tree[name]
        if isinstance(value, list):
            yield from value
        else:
            yield value


def _to_lists(tree: dict[str, Any]) -> dict[str, Any]:
    return {
        name: [a.tolist() for a in value] if isinstance(value, list) else value.tolist()
        for name, value in tree.items()
    }


def _from_lists(data: dict[str, Any], like: dict[str, Any]) -> dict[str, Any]:
    """Arrays shaped like ``like`` from nested lists (a wrong shape raises ``ValueError``)."""
    out: dict[str, Any] = {}
    for name, value in like.items():
        if isinstance(value, list):
            out[name] = [
                np.asarray(a, dtype=float).reshape(ref.shape)
                for a, ref in zip(data[name], value, strict=True)
            ]
        else:
            out[name] = np.asarray(data[name], dtype=float).reshape(value.shape)
    return out
