"""Bad input across the public API: every case is refused with the right exception type and a message that names
the argument (or the thing at fault) and what would be valid. One row per case; the ids read as a table."""
import math

import pytest
import torch
from torch import nn

from looplab.callback import Callback, CallbackHandler
from looplab.checkpoint import learner_state, load_learner_state, read_checkpoint, state_digest
from looplab.checkpoint_callback import Checkpoint
from looplab.data import ArrayDataset, DataLoaders, EpochBatchSampler, default_split_batch, load_digits, make_rings
from looplab.engine import AMPEngine, DeviceEngine, Engine
from looplab.data import set_seed
from looplab.learner import Learner, Recorder
from looplab.loss_plot import LossPlot
from looplab.metrics import Accuracy, MeanReducer, wrap_reducer
from looplab.resume import StatefulDistributedSampler
from looplab.sampler_chain import DistributedSampler, SeekableBatchSampler, SkipSampler, make_batch_sampler
from looplab.samplers import ReproducibleShuffleSampler
from looplab.widgets import Throttle

X, Y = load_digits()
TINY = DataLoaders([(X[:8], Y[:8])], None)


def model():
    return nn.Linear(64, 10)


def fit(learn, n=1, **kwargs):
    learn.remove_cbs(learn.progress)
    learn.fit(n, **kwargs)


CASES = [
    # data
    ("ArrayDataset of unequal lengths", lambda: ArrayDataset(X[:3], Y[:2]), ValueError, ["same length", "[3, 2]"]),
    ("EpochBatchSampler bs=0", lambda: EpochBatchSampler(10, 0), ValueError, ["bs", ">= 1", "0"]),
    ("EpochBatchSampler n='10'", lambda: EpochBatchSampler("10", 2), TypeError, ["n must be an int", "str"]),
    ("EpochBatchSampler.set_epoch(-1)", lambda: EpochBatchSampler(10, 2).set_epoch(-1), ValueError, ["epoch", ">= 0"]),
    ("from_tensors x, y of other lengths", lambda: DataLoaders.from_tensors(X[:10], Y[:9]), ValueError,
     ["same length", "10", "9"]),
    ("from_tensors valid_pct=1.5", lambda: DataLoaders.from_tensors(X, Y, valid_pct=1.5), ValueError,
     ["valid_pct", "[0, 1)", "1.5"]),
    ("make_rings n=0", lambda: make_rings(n=0), ValueError, ["n must be >= 1", "0"]),
    # learner
    ("Learner model='model'", lambda: Learner("model", TINY), TypeError, ["model must be a torch.nn.Module", "str"]),
    ("Learner dls=list", lambda: Learner(model(), [(X, Y)]), TypeError, ["dls must have .train", "list"]),
    ("Learner loss_func='ce'", lambda: Learner(model(), TINY, loss_func="ce"), TypeError, ["loss_func must be callable"]),
    ("Learner lr=nan", lambda: Learner(model(), TINY, lr=math.nan), ValueError, ["lr must be a finite number > 0", "nan"]),
    ("Learner lr='0.1'", lambda: Learner(model(), TINY, lr="0.1"), TypeError, ["lr must be a finite number > 0", "'0.1'"]),
    ("fit(lr=0)", lambda: fit(Learner(model(), TINY), lr=0.0), ValueError, ["lr", "> 0", "0.0"]),
    ("opt_func returning an int", lambda: fit(Learner(model(), TINY, opt_func=lambda params, lr: 1)), TypeError,
     ["opt_func", "step, zero_grad and param_groups", "int"]),
    ("fit(n_epochs='2')", lambda: Learner(model(), TINY).fit("2"), TypeError, ["n_epochs must be an int", "'2'", "str"]),
    ("a generator as training data", lambda: fit(Learner(model(), DataLoaders((b for b in TINY.train), None))),
     TypeError, ["dls.train is an iterator", "list of batches", "DataLoader"]),
    ("a dict batch with no target key", lambda: fit(Learner(model(), DataLoaders([{"x": X[:4], "z": Y[:4]}], None))),
     TypeError, ["cannot tell inputs from targets", "'x': tensor(4, 64)", "labels", "split_batch="]),
    ("a dict batch with two target keys", lambda: default_split_batch({"x": X[:2], "y": Y[:2], "labels": Y[:2]}),
     TypeError, ["cannot tell inputs from targets", "'labels'", "split_batch="]),
    ("split_batch=3", lambda: Learner(model(), TINY, split_batch=3), TypeError, ["split_batch must be callable"]),
    ("a model that fails on the batch's shape", lambda: fit(Learner(nn.Linear(65, 10), TINY)), RuntimeError,
     ["the model failed on training batch 0 of epoch 0", "xb tensor(8, 64)"]),
    ("a loss that is not a scalar", lambda: fit(Learner(model(), TINY, loss_func=lambda p, y: p.sum(1))), ValueError,
     ["loss_func must return a scalar", "tensor(8,)", "reduction='mean'"]),
    ("validate without validation data", lambda: Learner(model(), TINY).validate(), ValueError, ["dls.valid is None"]),
    ("set_seed(1.5)", lambda: set_seed(1.5), TypeError, ["seed must be an int", "float"]),
    # callbacks
    ("a callback class instead of an instance", lambda: Learner(model(), TINY, cbs=[Recorder]), TypeError,
     ["got the class Recorder", "Recorder()"]),
    ("a second Recorder", lambda: Learner(model(), TINY, cbs=[Recorder()]), ValueError, ["Recorder", "only one"]),
    ("removing a callback never added", lambda: CallbackHandler([]).remove(Recorder()), ValueError,
     ["is not one of this handler's callbacks"]),
    ("an event name with a typo", lambda: CallbackHandler([type("Typo", (Callback,), {"on_step_start": lambda s: 0})()]),
     ValueError, ["on_step_start", "did you mean on_step_begin"]),
    # metrics
    ("MeanReducer.add of a vector", lambda: MeanReducer("m").add(torch.ones(3), 3), ValueError,
     ["m: expected a scalar batch mean", "(3,)"]),
    ("a mean over nothing", lambda: MeanReducer("m").value(), ValueError, ["no items were seen"]),
    ("Accuracy with mismatched shapes", lambda: Accuracy().update(torch.ones(4, 3), torch.ones(5)), ValueError,
     ["(4, 3)", "(5,)", "expected preds (batch, n_classes)"]),
    ("wrap_reducer(3)", lambda: wrap_reducer(3), TypeError, ["callable fn(preds, yb)", "3"]),
    ("metrics=['accuracy']", lambda: Learner(model(), TINY, metrics=["accuracy"]), TypeError,
     ["metrics must be MetricReducer instances or functions", "'accuracy'"]),
    # samplers
    ("ReproducibleShuffleSampler seed='1'", lambda: ReproducibleShuffleSampler(range(10), seed="1"), TypeError,
     ["seed must be an int", "str"]),
    ("DistributedSampler rank=2 of 2", lambda: DistributedSampler(range(10), num_workers=2, rank=2), ValueError,
     ["rank", "[0, 1]", "2"]),
    ("SkipSampler skip=-1", lambda: SkipSampler(range(10), -1), ValueError, ["skip must be an int >= 0", "-1"]),
    ("SeekableBatchSampler batch_size=0", lambda: SeekableBatchSampler(range(10), 0), ValueError,
     ["batch_size must be an int >= 1", "0"]),
    ("make_batch_sampler mode='sideways'", lambda: make_batch_sampler(range(10), "sideways", 0, 1, 0, 2), ValueError,
     ["mode must be 'training' or 'validation'", "'sideways'"]),
    ("StatefulDistributedSampler batch_size=0",
     lambda: StatefulDistributedSampler(range(10), 0, num_replicas=1, rank=0), ValueError, ["batch_size must be an int >= 1"]),
    # checkpoints
    ("Checkpoint every_n_batches=0", lambda: Checkpoint("x.pt", every_n_batches=0), ValueError,
     ["every_n_batches must be an int >= 1", "0"]),
    ("a Checkpoint that never saves", lambda: Checkpoint("x.pt", at_epoch_end=False), ValueError,
     ["would never save", "every_n_batches", "at_epoch_end=True"]),
    ("Checkpoint path=3", lambda: Checkpoint(3), TypeError, ["path must be a str or os.PathLike", "int"]),
    ("read_checkpoint of a missing file", lambda: read_checkpoint("/nonexistent/ckpt.pt"), FileNotFoundError,
     ["no checkpoint at", "/nonexistent/ckpt.pt"]),
    ("a state holding a set", lambda: state_digest({"a": {1, 2}}), TypeError,
     ["state['a'] is a builtins.set", "sorted()"]),
    # widgets
    ("LossPlot mode='tv'", lambda: LossPlot(mode="tv"), ValueError, ["mode must be one of", "'auto'", "'tv'"]),
    ("Throttle every_ms=-1", lambda: Throttle(-1, 0.05), ValueError, ["every_ms", "> 0", "-1"]),
    # engines
    ("engine='cpu'", lambda: Learner(model(), TINY, engine="cpu"), TypeError,
     ["engine must be a looplab.engine.Engine", "DeviceEngine()", "str"]),
    ("engine=AMPEngine (the class)", lambda: Learner(model(), TINY, engine=AMPEngine), TypeError, ["AMPEngine()"]),
    ("a device this machine lacks", lambda: DeviceEngine("mps" if not torch.backends.mps.is_available() else "xpu"),
     ValueError, ["is not available on this machine", "available here:"]),
    ("AMPEngine(torch.float32)", lambda: AMPEngine(torch.float32, device="cpu"), ValueError,
     ["dtype must be torch.float16 or torch.bfloat16", "float32"]),
    ("sync_tensor mode='max'", lambda: DeviceEngine("cpu").sync_tensor(torch.ones(1), "max"), ValueError,
     ["'sum', 'mean' or 'all_gather'", "'max'"]),
    ("an Engine subclass without the tensor methods", lambda: type("Half", (Engine,), {})(), TypeError,
     ["must define sync_device", "inherit from DeviceEngine"]),
]


@pytest.mark.parametrize("label, fn, exc_type, fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_a_message_that_says_what_is_valid(label, fn, exc_type, fragments):
    with pytest.raises(exc_type) as info:
        fn()
    message = str(info.value)
    missing = [f for f in fragments if f not in message]
    assert not missing, f"{label}: the message lacks {missing}: {message}"


def test_there_are_at_least_35_cases_over_every_part_of_the_api():
    assert len(CASES) >= 35


def test_a_loss_that_is_nan_from_the_first_batch_is_reported_once_by_name():
    nan_data = DataLoaders([(torch.full((8, 64), math.nan), Y[:8]), (X[:8], Y[:8])], None)
    with pytest.warns(RuntimeWarning, match=r"the training loss is nan from training batch 1 .*NaN/inf") as caught:
        fit(Learner(model(), nan_data), n=2)
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1  # once per run of bad losses


def test_a_refused_checkpoint_leaves_the_learner_exactly_as_it_was():
    set_seed(0)
    saved = Learner(model(), DataLoaders.from_tensors(X, Y, bs=64))
    fit(saved)
    state = learner_state(saved)
    other = Learner(nn.Linear(64, 11), DataLoaders.from_tensors(X, Y, bs=64))
    other.remove_cbs(other.progress)
    before = learner_state(other)
    with pytest.raises(ValueError, match=r"other shapes: weight \(10, 64\) \(this model's \(11, 64\)\)"):
        load_learner_state(other, state)
    after = learner_state(other)
    assert torch.equal(after["model"]["weight"], before["model"]["weight"]) and after["optimizers"] == {}
    assert after["loop"] == before["loop"] and after["data_order"] == before["data_order"] and not other.resuming


def test_a_fit_refused_at_its_first_batch_prints_no_progress_table(capsys):
    "The table's header waits for a batch to run: a refused fit shows its error alone, a fit that runs its table."
    wrong = Learner(nn.Linear(64, 3), TINY)  # 3 outputs for labels up to 9: the loss refuses the first batch
    with pytest.raises(Exception, match="loss_func"):
        wrong.fit(1)
    assert capsys.readouterr().out == ""
    Learner(nn.Linear(64, 10), TINY).fit(2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["epoch", "train_loss", "valid_loss", "time"] and len(lines) == 3
