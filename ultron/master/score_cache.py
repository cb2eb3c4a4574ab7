"""The score cache (paper V-E): scores in Redis, keyed by code base, data and configuration.

A configuration already scored with the same code base (and, for a job with a ``data``
section, the same data batched the same way) is answered from the cache instead of being
trained again. Only completed trials are cached; failures are not.

Example:
    >>> cache = ScoreCache(redis_client, code_hash="abc")          # doctest: +SKIP
    >>> cache.put({"lr": 0.1}, {"score": 0.9, "metrics": {}})      # doctest: +SKIP
    >>> cache.get_many([{"lr": 0.1}])                               # doctest: +SKIP
    [{'score': 0.9, 'metrics': {}}]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ultron.algorithms.space import Config, canonical
from ultron.services import keys

__all__ = ["ScoreCache"]


class ScoreCache:
    """Scores of configurations, one Redis hash per code base (and data).

    Args:
        client: a ``redis.Redis`` client.
        code_hash: the content hash of the code base.
        data_hash: the data service's fingerprint (``DataServiceHandle.fingerprint()``), or
            ``None`` for a job without streamed data.
        namespace: key prefix.
    """

    def __init__(
        self,
        client: Any,
        *,
        code_hash: str,
        data_hash: str | None = None,
        namespace: str = keys.NAMESPACE,
    ) -> None:
        self.client = client
        self.key = keys.score_cache(code_hash, data_hash, namespace=namespace)

    def get_many(self, configs: Sequence[Config]) -> list[dict[str, Any] | None]:
        """The cached entries of ``configs`` (``None`` where absent), in one round trip."""
        if not configs:
            return []
        raw = self.client.hmget(self.key, [canonical(c) for c in configs])
        return [json.loads(v) if v is not None else None for v in raw]

    def put(self, config: Config, entry: dict[str, Any]) -> None:
        """Cache ``entry`` (score, metrics, where it came from) for ``config``."""
        self.client.hset(self.key, canonical(config), json.dumps(entry))

    def __len__(self) -> int:
        return int(self.client.hlen(self.key))
