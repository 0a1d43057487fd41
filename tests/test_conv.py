"looplab.conv: the signals are a pure function of the seed, balanced, drawn from no global generator; the nets' shapes."
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from looplab.conv import SIGNAL_TEMPLATES, conv_net, make_signals, mlp, signal_dls


def test_same_seed_same_data_and_other_seeds_other_data():
    x, y = make_signals(500, seed=7)
    x2, y2 = make_signals(500, seed=7)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    for other in (8, 70, 7 + 2**32):
        assert not torch.equal(make_signals(500, seed=other)[0], x)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 120), seed=st.integers(0, 2**63 - 1), length=st.integers(24, 64))
def test_shapes_balance_and_prefix(n, seed, length):
    x, y = make_signals(n, seed=seed, length=length)
    assert x.shape == (n, length) and x.dtype == torch.float32 and torch.isfinite(x).all()
    assert y.shape == (n,) and y.dtype == torch.int64
    for start in range(0, n - n % 10, 10):  # every whole block of ten holds each class once
        assert sorted(y[start:start + 10].tolist()) == list(range(10))
    longer_x, longer_y = make_signals(n + 13, seed=seed, length=length)
    assert torch.equal(longer_x[:n], x) and torch.equal(longer_y[:n], y)  # a longer set starts with the shorter one


def test_making_data_leaves_the_global_generators_alone():
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    torch_state, numpy_state, python_state = torch.get_rng_state(), np.random.get_state(), random.getstate()
    make_signals(300, seed=1)
    signal_dls(n_train=50, n_valid=20, seed=2)
    assert torch.equal(torch.get_rng_state(), torch_state)
    after = np.random.get_state()
    assert np.array_equal(after[1], numpy_state[1]) and after[2:] == numpy_state[2:]
    assert random.getstate() == python_state


def test_the_global_seed_does_not_change_the_data():
    torch.manual_seed(0)
    x0, _ = make_signals(50, seed=3)
    torch.manual_seed(1)
    np.random.seed(1)
    x1, _ = make_signals(50, seed=3)
    assert torch.equal(x0, x1)


def test_with_every_random_move_off_each_class_is_its_centred_pattern():
    still = dict(max_shift=0, stretch=0, amp=0, tilt=0, smooth_noise=0, noise=0)
    x, y = make_signals(30, seed=4, **still)
    for k in range(10):
        rows = x[y == k]
        assert torch.equal(rows[0], rows[1]) and torch.equal(rows[0], rows[2])
    assert (x[:, :10] == 0).all() and (x[:, 30:] == 0).all()  # width 20 around the middle: samples 10 to 29
    lo, hi = SIGNAL_TEMPLATES.min(dim=1).values, SIGNAL_TEMPLATES.max(dim=1).values
    assert ((x >= lo[y, None] - 1e-6) & (x <= hi[y, None] + 1e-6)).all()  # interpolation stays within the template


def test_the_moves_move_the_pattern():
    still = dict(stretch=0, amp=0, tilt=0, smooth_noise=0, noise=0)
    x, _ = make_signals(200, seed=5, max_shift=10, **still)
    support = [(row != 0).nonzero().flatten() for row in x]
    starts = torch.tensor([s.min().item() for s in support if len(s)])
    assert starts.min() < 5 and starts.max() > 15  # centres spread over ±10 samples


def test_signal_dls_splits_validation_first():
    dls = signal_dls(n_train=40, n_valid=30, bs=8, seed=6)
    x, y = make_signals(70, seed=6)
    assert torch.equal(dls.valid.dataset.tensors[0], x[:30]) and torch.equal(dls.train.dataset.tensors[1], y[30:])
    assert torch.equal(signal_dls(n_train=10, n_valid=30, seed=6).valid.dataset.tensors[0], x[:30])
    xb, yb = next(iter(dls.train))
    assert xb.shape == (8, 40) and yb.shape == (8,)


@pytest.mark.parametrize("length", [12, 40, 100])
@pytest.mark.parametrize("channels", [(8,), (32, 64, 64), (4, 4, 4, 4)])
def test_conv_net_gives_one_logit_per_class_for_any_length(length, channels):
    net = conv_net(n_classes=7, channels=channels)
    assert net(torch.randn(5, length)).shape == (5, 7)


def test_mlp_output_shape_and_parameter_counts():
    assert mlp(n_in=40)(torch.randn(3, 40)).shape == (3, 10)
    counts = [sum(p.numel() for p in m.parameters()) for m in (conv_net(), mlp())]
    assert counts == [31_690, 30_310]


@pytest.mark.parametrize("call, error, fragment", [
    (lambda: make_signals(0), ValueError, "n must be"),
    (lambda: make_signals(5, seed=-1), ValueError, "seed"),
    (lambda: make_signals(5, seed="0"), TypeError, "seed"),
    (lambda: make_signals(5, length=20, max_shift=10), ValueError, "max_shift=10"),
    (lambda: make_signals(5, width=0), ValueError, "width"),
    (lambda: make_signals(5, amp=1.5), ValueError, "amp"),
    (lambda: make_signals(5, tilt=float("nan")), ValueError, "tilt"),
    (lambda: make_signals(5, smooth_noise=-1), ValueError, "smooth_noise"),
    (lambda: signal_dls(n_valid=0), ValueError, "n_valid"),
    (lambda: conv_net(channels=[]), ValueError, "channels"),
    (lambda: conv_net(channels=64), ValueError, "channels"),
    (lambda: conv_net(kernel_size=2), ValueError, "odd"),
    (lambda: conv_net(n_classes=1), ValueError, "n_classes"),
    (lambda: mlp(n_in=0), ValueError, "n_in"),
    (lambda: mlp(p=-0.1), ValueError, "p must be"),
])
def test_bad_arguments_are_refused_by_name(call, error, fragment):
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        call()
