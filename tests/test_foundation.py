"Foundation: README in sync, the Learner in a plain script, exact reducers, callback order, bad input."
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from looplab.callback import Callback, CallbackHandler
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.learner import Learner
from looplab.metrics import Accuracy, MeanReducer, as_reducers, wrap_reducer

ROOT = Path(__file__).resolve().parent.parent


def test_readme_is_index_notebook():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "make_readme.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


SCRIPT = """
import torch
from torch import nn
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.learner import Learner
from looplab.metrics import Accuracy
set_seed(0)
dls = DataLoaders.from_tensors(*load_digits(), bs=64)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
learn = Learner(model, dls, lr=0.2, metrics=[Accuracy()])
learn.fit(2)
print("LOSSES", learn.recorder.losses[:5], learn.recorder.losses[-1])
"""


def run_script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=300)


def test_learner_in_a_plain_script_is_reproducible_across_processes(tmp_path):
    first = run_script(tmp_path)
    second = run_script(tmp_path)
    assert first.returncode == 0, first.stderr
    lines = [line for line in first.stdout.splitlines() if not line.startswith("epoch ")]  # a log's batch lines aside
    assert lines[0].split() == ["epoch", "train_loss", "valid_loss", "accuracy", "time"]
    assert lines[1].strip().startswith("1/2") and lines[2].strip().startswith("2/2")
    losses_line = [l for l in lines if l.startswith("LOSSES")]
    assert losses_line and losses_line == [l for l in second.stdout.splitlines() if l.startswith("LOSSES")]


batches = st.lists(st.integers(min_value=1, max_value=17), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(sizes=batches, n_slots=st.integers(min_value=1, max_value=4), seed=st.integers(0, 2**31 - 1))
def test_reducers_are_exact_for_any_batching_and_slots(sizes, n_slots, seed):
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    preds = torch.randn(n, 5, generator=g)
    targs = torch.randint(0, 5, (n,), generator=g)
    chunks = list(zip(preds.split(sizes), targs.split(sizes)))
    slots_acc = [Accuracy() for _ in range(n_slots)]
    slots_loss = [MeanReducer("loss") for _ in range(n_slots)]
    slots_fn = [wrap_reducer(lambda p, t: (p.argmax(-1) == t).float().mean(), "acc") for _ in range(n_slots)]
    for i, (p, t) in enumerate(chunks):
        slots_acc[i % n_slots].update(p, t)
        slots_fn[i % n_slots].update(p, t)
        slots_loss[i % n_slots].add(nn.functional.cross_entropy(p, t), len(t))
    exact_acc = (preds.argmax(-1) == targs).sum().item() / n
    assert Accuracy().cross_slot_reduce([s.per_slot_reduce() for s in slots_acc]) == exact_acc
    fn_value = slots_fn[0].cross_slot_reduce([s.per_slot_reduce() for s in slots_fn])
    assert abs(fn_value - exact_acc) < 1e-6  # the function returns float32 batch means
    loss_value = MeanReducer().cross_slot_reduce([s.per_slot_reduce() for s in slots_loss])
    assert abs(loss_value - nn.functional.cross_entropy(preds.double(), targs).item()) < 1e-5


@settings(max_examples=50, deadline=None)
@given(orders=st.lists(st.integers(-3, 3), min_size=1, max_size=8))
def test_callbacks_run_by_order_then_insertion(orders):
    calls = []

    class Tagged(Callback):
        def __init__(self, i, order):
            self.i = i
            self.order = order

        def on_epoch_begin(self):
            calls.append(self.i)

    CallbackHandler([Tagged(i, o) for i, o in enumerate(orders)])("on_epoch_begin")
    assert calls == sorted(range(len(orders)), key=lambda i: (orders[i], i))


def model():
    return nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))


x, y = load_digits()
tiny = DataLoaders([(x[:8], y[:8])], [(x[8:20], y[8:20])])


@pytest.mark.parametrize("n_epochs, error, words", [(-1, ValueError, "n_epochs must be an int >= 0, got -1"),
                                                     (1.5, TypeError, "n_epochs must be an int, got 1.5 of type float"),
                                                     ("2", TypeError, "n_epochs must be an int, got '2' of type str"),
                                                     (True, TypeError, "n_epochs must be an int, got True of type bool"),
                                                     (None, TypeError, "n_epochs must be an int, got None")])
def test_bad_n_epochs(n_epochs, error, words):
    "A wrong type is a TypeError, a wrong value a ValueError, as checks.check_int says everywhere."
    with pytest.raises(error, match=re.escape(words)):
        Learner(model(), tiny).fit(n_epochs)


def test_zero_epochs_trains_nothing():
    learn = Learner(model(), tiny)
    before = [p.detach().clone() for p in learn.model.parameters()]
    learn.fit(0)
    assert learn.recorder.losses == [] and learn.recorder.values == []
    assert all(torch.equal(b, p) for b, p in zip(before, learn.model.parameters()))


class NoBatches:
    "An iterable without a length that yields nothing (a filtered stream that filtered everything out)."
    def __iter__(self):
        return iter([])


def test_empty_training_data_without_len_is_caught_after_the_epoch():
    learn = Learner(model(), DataLoaders(NoBatches(), None))
    with pytest.raises(ValueError, match="yielded no batch"):
        learn.fit(1)


@pytest.mark.parametrize("bad, exc, fragment", [
    ([Accuracy], TypeError, "Accuracy()"),
    ([42], TypeError, "MetricReducer"),
    (["accuracy"], TypeError, "MetricReducer"),
    ([Accuracy(), Accuracy()], ValueError, "duplicate"),
])
def test_bad_metrics(bad, exc, fragment):
    with pytest.raises(exc, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        as_reducers(bad)


def test_bad_model_and_dls():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        Learner(lambda xb: xb, tiny)
    with pytest.raises(TypeError, match="DataLoaders"):
        Learner(model(), [(x[:8], y[:8])])


def test_callbacks_passed_to_fit_are_detached_after_fit():
    class Count(Callback):
        n = 0

        def on_batch_end(self):
            self.n += 1

    count = Count()
    learn = Learner(model(), tiny)
    learn.fit(2, cbs=count)
    assert count.n == 2 * 1 + 2 * 1  # one train and one valid batch per epoch
    assert count not in learn.cbs
    learn.fit(1)
    assert count.n == 4


def test_second_fit_continues_with_the_same_optimizer():
    set_seed(0)
    learn = Learner(model(), tiny, opt_func=lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9))
    learn.fit(1)
    opt = learn.opt
    learn.fit(1, lr=0.05)
    assert learn.opt is opt and opt.param_groups[0]["lr"] == 0.05
    assert learn.n_iter == 2 and len(learn.recorder.lrs) == 2 and learn.recorder.lrs == [0.1, 0.05]


def test_a_summed_loss_is_recorded_per_item_and_small_losses_keep_their_digits():
    "reduction='sum' records the history of 'mean' (at an LR too small to move the weights); 1.234e-04, not 0.0001."
    import io

    def run(loss_func):
        set_seed(0)
        learn = Learner(nn.Linear(64, 10), DataLoaders.from_tensors(*load_digits(), bs=64), loss_func=loss_func,
                        lr=1e-9)
        learn.progress.file = io.StringIO()
        learn.fit(1)
        return learn

    summed = run(nn.CrossEntropyLoss(reduction="sum"))
    mean = run(nn.CrossEntropyLoss())
    assert summed.recorder.values[0]["valid_loss"] == pytest.approx(mean.recorder.values[0]["valid_loss"], rel=1e-6)
    assert summed.recorder.losses == pytest.approx(mean.recorder.losses, rel=1e-5)  # lr 1e-9: the weights barely move
    from looplab.progress import _epoch_row
    row = {"epoch": 0, "train_loss": 1.2341e-4, "valid_loss": 0.25, "time": 1.0}
    assert _epoch_row(row, ["epoch", "train_loss", "valid_loss", "time"], 1).split()[1:3] == ["1.234e-04", "0.2500"]
