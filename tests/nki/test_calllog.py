"""The kernel call log: off by default, and when on, one entry per simulated call with the cost model's
estimate (computed once per compiled kernel)."""
from __future__ import annotations

import numpy as np
import pytest

from nkihub import nki
from nkihub.nki import calllog
import nkihub.nki.language as nl


@nki.jit
def double(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(x), 2.0))
    return out


@pytest.fixture
def log():
    calllog.log().clear()
    yield calllog.log()
    calllog.enable(False)
    calllog.log().clear()


def test_off_by_default(log):
    double(np.ones((4, 4), np.float32))
    assert not calllog.enabled() and len(log) == 0


def test_records_calls_with_estimates(log):
    calllog.enable()
    x = np.ones((8, 16), np.float32)
    double(x)
    double(x)
    a, b = log.calls
    assert a.kernel == "double" and a.shapes == ((8, 16),) and a.dtypes == ("float32",) and a.device == "numpy"
    assert a.estimated_s == b.estimated_s > 0 and a.simulated_s > 0
    assert log.estimated_s() == pytest.approx(2 * a.estimated_s)
    assert log.summary()["double"]["calls"] == 2
    assert "double" in log.table() and '"kernel": "double"' in log.to_json()
