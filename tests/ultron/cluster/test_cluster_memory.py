"""``resources.memory``, a Kubernetes quantity, becomes the local workers' memory limit in bytes."""

from __future__ import annotations

import pytest

from ultron.cluster.factory import _memory_limit
from ultron.spec.sections import _QUANTITY

# Every suffix the spec accepts (_QUANTITY), with its Kubernetes meaning.
FACTORS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


@pytest.mark.parametrize("suffix", list(FACTORS))
@pytest.mark.parametrize("number", ["0", "1", "512", "100000", "1.5", "0.25"])
def test_every_accepted_quantity_in_bytes(suffix: str, number: str) -> None:
    quantity = number + suffix
    assert _QUANTITY.match(quantity)
    assert _memory_limit(quantity) == int(float(number) * FACTORS[suffix])


def test_examples_and_no_limit() -> None:
    assert _memory_limit("512Mi") == 512 * 2**20
    assert _memory_limit("4Gi") == 4 * 2**30
    assert _memory_limit("1G") == 10**9
    assert _memory_limit("100000Mi") == 100000 * 2**20  # the paper's Fig. 2
    assert _memory_limit(None) == 0  # Dask: no limit
