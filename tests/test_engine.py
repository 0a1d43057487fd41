"""The loop core: engines, the five defects of the old loop (a)-(e), several optimizers and AMP resumed in a new
process, the documented epoch length, and the engine's bad input."""
import math
import random
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from torch import nn

from looplab.callback import (EVENTS, Callback, CancelBackwardException, CancelBatchException, CancelEpochException,
                              CancelException, CancelFitException, CancelStepException, CancelValidateException,
                              CancelZeroGradException)
from looplab.checkpoint import learner_state, load_learner_state
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.engine import AMPEngine, DeviceEngine, Engine
from looplab.learner import Learner

WORKER = Path(__file__).resolve().parent / "engine_worker.py"
X, Y = load_digits()


def quiet(learn: Learner) -> Learner:
    learn.remove_cbs(learn.progress)
    return learn


def small_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def batches(n: int, bs: int = 8) -> DataLoaders:
    return DataLoaders([(X[i * bs:(i + 1) * bs], Y[i * bs:(i + 1) * bs]) for i in range(n)], None)


class StepScheduler(Callback):
    "Steps a torch LR scheduler after the optimizer, as torch documents."
    def __init__(self, make):
        self.make = make

    def on_train_begin(self):
        self.sched = self.make(self.learn.opt)

    def on_step_end(self):
        self.sched.step()


def test_a_recorded_lr_is_the_one_the_step_used():
    sched = StepScheduler(lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 / (step + 1)))
    learn = quiet(Learner(small_model(), batches(4), lr=1.0, cbs=[sched]))
    learn.fit(1)
    assert learn.recorder.lrs == [1.0, 1 / 2, 1 / 3, 1 / 4]


def test_b_a_scaled_loss_is_not_recorded_as_the_loss():
    class Scale(Callback):
        def on_backward_begin(self):
            self.learn.loss_grad = self.learn.loss_grad * 1000

    set_seed(0)
    plain = quiet(Learner(small_model(), batches(1)))
    plain.fit(1)
    set_seed(0)
    scaled = quiet(Learner(small_model(), batches(1), cbs=[Scale()]))
    scaled.fit(1)
    assert scaled.recorder.losses == plain.recorder.losses and 1 < plain.recorder.losses[0] < 5


def test_c_two_optimizers_are_both_in_the_state_and_come_back():
    learn = quiet(Learner(small_model(), batches(3)))
    learn.opts = {"a": torch.optim.Adam(learn.model.parameters()), "b": torch.optim.SGD(learn.model.parameters(), 0.1)}
    learn.fit(1)
    state = learner_state(learn)
    assert sorted(state["optimizers"]) == ["a", "b"] and state["opt_name"] == "a"
    other = quiet(Learner(small_model(), batches(3)))
    other.opts = {"a": torch.optim.Adam(other.model.parameters()), "b": torch.optim.SGD(other.model.parameters(), 0.1)}
    load_learner_state(other, state)
    assert other.opt is other.opts["a"]
    assert torch.equal(other.opts["a"].state_dict()["state"][0]["exp_avg"].cpu(), learn.opts["a"].state_dict()["state"][0]["exp_avg"].cpu())


def test_d_the_engine_moves_model_and_nested_batches():
    Pair = namedtuple("Pair", "x y")
    engine = DeviceEngine("cpu")
    moved = engine.sync_device({"a": [torch.ones(1), (torch.zeros(2), "s")], "p": Pair(torch.ones(1), 3)})
    assert isinstance(moved["p"], Pair) and moved["a"][1][1] == "s" and moved["p"].y == 3
    assert isinstance(moved["a"], list) and isinstance(moved["a"][1], tuple)
    learn = quiet(Learner(small_model(), batches(2)))
    learn.fit(1)
    assert learn.engine.device == next(learn.model.parameters()).device


@pytest.mark.parametrize("cancel", [CancelFitException, CancelEpochException, CancelValidateException,
                                    CancelBatchException, CancelBackwardException, CancelStepException,
                                    CancelZeroGradException])
def test_e_what_a_batch_begin_opens_is_always_closed(cancel):
    class Opener(Callback):
        def __init__(self):
            self.open = 0
            self.max_open = 0

        def on_batch_begin(self):
            self.open += 1
            self.max_open = max(self.max_open, self.open)

        def on_batch_end(self):
            self.open = 0

        def on_batch_cancel(self):
            self.open = 0

    class RaiseAt(Callback):
        def __init__(self, event, order):
            self.order = order
            self.left = 1
            setattr(self, event, self.fire)

        def fire(self):
            if self.left:
                self.left -= 1
                raise cancel()

    dls = DataLoaders(batches(3).train, batches(1).train)
    for event in EVENTS[:-1]:
        for order in (-1, 1):
            opener = Opener()
            learn = quiet(Learner(small_model(), dls, cbs=[opener, RaiseAt(event, order)]))
            try:
                learn.fit(2)
            except CancelException:
                pass
            assert opener.open == 0 and opener.max_open <= 1, (event, order)  # closed, and never two open


def test_a_skipped_step_is_a_cancelled_step_for_the_schedule_and_the_counters():
    class Poison(Callback):
        def on_backward_end(self):
            if self.learn.iter == 1:
                next(self.learn.model.parameters()).grad.view(-1)[0] = math.inf

    sched = StepScheduler(lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 / (step + 1)))
    engine = AMPEngine(torch.float16, device="cpu")
    learn = quiet(Learner(small_model(), batches(4), lr=1.0, cbs=[Poison(), sched], engine=engine))
    learn.fit(1)
    assert learn.n_steps == 3 and learn.recorder.n_skipped == 1 and engine.scaler.get_scale() == 2.0**15
    assert learn.recorder.lrs == [1.0, 1 / 2, 1 / 2, 1 / 3]


def run(out: Path, *args) -> dict:
    proc = subprocess.run([sys.executable, str(WORKER), str(out), *map(str, args)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return torch.load(out, weights_only=True)


def assert_same(a: dict, b: dict) -> None:
    assert all(torch.equal(p, q) for p, q in zip(a["params"], b["params"])), "parameters differ"
    assert torch.equal(a["losses"], b["losses"]) and torch.equal(a["valid"], b["valid"])
    for key in ("n_iter", "n_steps", "n_skipped", "scale"):
        assert a[key] == b[key], key
    for name, state in a["opt_states"].items():
        for i, s in state["state"].items():
            for key, value in s.items():
                assert torch.equal(value, b["opt_states"][name]["state"][i][key]), (name, i, key)


@pytest.mark.parametrize("amp", [False, True])
def test_two_optimizers_resume_in_a_new_process_bit_identical(tmp_path, amp):
    "Two optimizers switched by a callback (and, with AMP, a loss scaler that skips steps) stop at a random batch."
    flags = ["--amp", "--overflow-every", 17] if amp else []
    reference = run(tmp_path / "reference.pt", *flags)
    if amp:
        assert reference["n_skipped"] > 0 and reference["n_steps"] < reference["n_iter"]
        assert reference["scale"] < 2.0**12  # the scaler halved after the overflows
    stop = random.Random(42 + amp).randrange(3, 85)  # 45 batches per epoch: anywhere in the two epochs
    ckpt = tmp_path / "ckpt.pt"
    stopped = run(tmp_path / "stopped.pt", *flags, "--ckpt", ckpt, "--stop-at", stop)
    assert stopped["n_iter"] == stop
    resumed = run(tmp_path / "resumed.pt", *flags, "--ckpt", ckpt, "--resume")
    assert_same(resumed, reference)


def test_epoch_len_is_the_same_in_a_resumed_run():
    "A callback reads learn.epoch_len at every event: the resumed run reads what the uninterrupted one read."
    class Lengths(Callback):
        def __init__(self):
            self.seen = []

        def on_epoch_begin(self):
            self.seen.append(("epoch_begin", self.learn.epoch, self.learn.epoch_len))

        def on_batch_end(self):
            if self.learn.training:
                self.seen.append(("batch", self.learn.n_iter, self.learn.epoch_len))

        def state_dict(self):
            return {}

    class PauseAt(Callback):
        order = 100

        def __init__(self, n=None):
            self.n = n

        def on_batch_end(self):
            if self.learn.training and self.learn.n_iter == self.n:
                self.state = learner_state(self.learn)
                raise CancelFitException()

    def make(*cbs):
        set_seed(1)
        return quiet(Learner(small_model(), DataLoaders.from_tensors(X, Y, bs=100, seed=3), cbs=list(cbs)))

    full = Lengths()
    make(full, PauseAt()).fit(2)
    pause = PauseAt(n=20)
    make(Lengths(), pause).fit(2)
    resumed_lengths = Lengths()
    resumed = make(resumed_lengths, PauseAt())
    load_learner_state(resumed, pause.state)
    resumed.fit(2)
    assert resumed.epoch_len == 15 and len(resumed.dls.train) == 15
    assert resumed_lengths.seen == [s for s in full.seen if s[0] != "batch" or s[1] > 20][1:]


def test_bad_input_to_engines_and_the_learner():
    with pytest.raises(TypeError, match="engine must be a looplab.engine.Engine"):
        Learner(small_model(), batches(1), engine="cpu")
    with pytest.raises(TypeError, match=r"pass AMPEngine\(\) instead"):
        Learner(small_model(), batches(1), engine=AMPEngine)
    with pytest.raises(ValueError, match="not available on this machine.*available here: .*cpu"):
        DeviceEngine("cuda" if not torch.cuda.is_available() else "xpu")
    with pytest.raises(ValueError, match="torch.float16 or torch.bfloat16"):
        AMPEngine(torch.float64, device="cpu")
    with pytest.raises(ValueError, match="'sum', 'mean' or 'all_gather'"):
        DeviceEngine("cpu").sync_tensor(torch.ones(1), "product")

    class NoTensorMethods(Engine):
        pass

    with pytest.raises(TypeError, match="must define sync_device"):
        NoTensorMethods()

    class BadClip(Callback):
        def on_train_begin(self):
            self.learn.clip_fn = "1.0"

    with pytest.raises(TypeError, match="clip_fn must be None or callable"):
        quiet(Learner(small_model(), batches(1), cbs=[BadClip()])).fit(1)


def test_a_state_from_other_optimizers_or_another_engine_is_refused_before_anything_changes():
    learn = quiet(Learner(small_model(), batches(2)))
    learn.fit(1)
    state = learner_state(learn)
    amp = quiet(Learner(small_model(), batches(2), engine=AMPEngine(torch.float16, device="cpu")))
    before = [p.detach().clone() for p in amp.model.parameters()]
    with pytest.raises(ValueError, match="saved by a DeviceEngine.*AMPEngine"):
        load_learner_state(amp, state)
    assert all(torch.equal(b, p) for b, p in zip(before, amp.model.parameters())) and not amp.resuming
    two = quiet(Learner(small_model(), batches(2)))
    two.opts = {"g": torch.optim.SGD(two.model.parameters(), 0.1), "d": torch.optim.SGD(two.model.parameters(), 0.1)}
    with pytest.raises(ValueError, match=r"optimizers \['main'\].*\['d', 'g'\]"):
        load_learner_state(two, state)
    assert not two.resuming


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; runs on a GPU machine")
@pytest.mark.parametrize("make_engine", [lambda: DeviceEngine("cuda"), lambda: AMPEngine(torch.float16, "cuda"),
                                         lambda: AMPEngine(torch.bfloat16, "cuda")])
def test_cpu_model_and_cpu_batches_train_on_cuda(make_engine):
    set_seed(0)
    learn = quiet(Learner(small_model(), DataLoaders.from_tensors(X, Y, bs=64), lr=0.2, engine=make_engine(),
                          opt_func=lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9)))
    learn.fit(5)
    assert next(learn.model.parameters()).is_cuda and learn.recorder.values[-1]["valid_loss"] < 0.5


def test_amp_float16_step_reads_the_gpu_no_more_than_gradscaler_itself(monkeypatch):
    "Every Tensor.item (a host sync on a GPU) and get_scale call in optimizer_step, against GradScaler's own recipe."
    reads = {"item": 0, "get_scale": 0}
    item, get_scale = torch.Tensor.item, torch.amp.GradScaler.get_scale

    def counted_item(self):
        reads["item"] += 1
        return item(self)

    def counted_get_scale(self):
        reads["get_scale"] += 1
        return get_scale(self)

    def backward_at(scale, x):
        torch.manual_seed(0)
        lin = nn.Linear(4, 1)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        engine = AMPEngine(torch.float16, device="cpu", init_scale=scale)
        with engine.autocast():
            loss = lin(torch.full((8, 4), x)).float().pow(2).mean()
        engine.backward_loss(loss, lin, opt)
        return engine, loss, lin, opt

    for scale, x, steps in ((2.0**10, 1.0, True), (2.0**16, 30.0, False)):  # a clean step; an overflow, skipped
        engine, loss, lin, opt = backward_at(scale, x)
        before = lin.weight.detach().clone()
        monkeypatch.setattr(torch.Tensor, "item", counted_item)
        monkeypatch.setattr(torch.amp.GradScaler, "get_scale", counted_get_scale)
        stepped = engine.optimizer_step(loss, lin, opt, clip_fn=lambda params: nn.utils.clip_grad_norm_(params, 1.0))
        monkeypatch.undo()
        assert stepped is steps and (not torch.equal(before, lin.weight)) is steps
        assert engine.scaler.get_scale() == (scale if steps else scale / 2)
        engine_reads = dict(reads)
        reads.update(item=0, get_scale=0)
        engine, loss, lin, opt = backward_at(scale, x)
        monkeypatch.setattr(torch.Tensor, "item", counted_item)
        monkeypatch.setattr(torch.amp.GradScaler, "get_scale", counted_get_scale)
        engine.scaler.unscale_(opt)
        engine.scaler.step(opt)
        engine.scaler.update()
        monkeypatch.undo()
        assert engine_reads == reads == {"item": 1, "get_scale": 0}, (engine_reads, reads)
        reads.update(item=0, get_scale=0)
