"""Where two features meet: save and load under DDP, precision under DDP, the callbacks a refused fit was given,
and callbacks removed in the middle of a fit. Each seam either works or refuses with a clear message."""
import pytest
import torch
from torch import nn

import dist_workers as w
from helpers import make_learner
from looplab.callback import Callback, CallbackError
from looplab.conv import conv_net, signal_dls
from looplab.data import set_seed
from looplab.distributed import launch
from looplab.engine import AMPEngine, DeviceEngine
from looplab.activations import ActivationPlot, ActivationStats
from looplab.learner import Learner
from looplab.profiler import Profiler, ProfilePlot
from looplab.regularize import GradientAccumulation

torch.set_num_threads(1)


def test_save_then_load_under_ddp_meets_at_a_barrier(tmp_path):
    assert launch(w.ddp_save_then_load, nprocs=2, args=(tmp_path / "weights.pt",)) == [True, True]


def test_to_bf16_under_ddp_keeps_every_rank_in_the_ddp_run():
    results = launch(w.ddp_to_bf16, nprocs=2)
    assert [r[:4] for r in results] == [("DistributedDataParallelAMPEngine", torch.bfloat16, 2, True),
                                        ("DistributedDataParallelAMPEngine", torch.bfloat16, 2, False)]
    for name, p in results[0][4].items():
        assert torch.equal(p, results[1][4][name]), name  # the ranks' gradients were averaged: one model


def test_precision_switches_keep_the_engine_or_refuse_it():
    learn = make_learner(engine=DeviceEngine("cpu"))
    assert type(learn.to_bf16().engine) is AMPEngine and learn.engine.dtype == torch.bfloat16

    class OwnEngine(DeviceEngine):
        pass

    with pytest.raises(ValueError, match="OwnEngine does not say how to train in torch.bfloat16"):
        make_learner(engine=OwnEngine("cpu")).to_bf16()


class Counts(Callback):
    def __init__(self):
        self.batches = 0

    def on_batch_end(self):
        self.batches += 1


def test_a_refused_fit_attaches_none_of_its_callbacks():
    learn = make_learner()
    counts = Counts()
    with pytest.raises(TypeError, match="'oops'"):
        learn.fit(1, cbs=[counts, "oops"])
    with pytest.raises(ValueError, match="Profiler is already attached"):
        learn.fit(1, cbs=[Profiler(), Profiler()])
    assert [type(cb).__name__ for cb in learn.cbs] == ["Recorder", "ProgressCallback"]
    learn.fit(1)
    assert counts.batches == 0


def test_a_fit_that_fails_before_its_first_batch_detaches_its_callbacks():
    learn = make_learner()
    learn.clip_fn = "not a function"
    with pytest.raises(TypeError, match="clip_fn"):
        learn.fit(1, cbs=[Counts()])
    assert [type(cb).__name__ for cb in learn.cbs] == ["Recorder", "ProgressCallback"]


class RemoveAt(Callback):
    "Removes `target` from the learner after training batch `n`."
    def __init__(self, target, n=2):
        self.target = target
        self.n = n

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n:
            self.learn.remove_cbs(self.target)


def hooks_on(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._backward_hooks) for m in model.modules())


@pytest.mark.parametrize("cls", [ActivationStats, ActivationPlot])
def test_activation_callbacks_removed_mid_fit_take_their_hooks_with_them(cls):
    set_seed(0)
    learn = Learner(conv_net(channels=(4, 8)), signal_dls(n_train=120, n_valid=40, bs=40, seed=1), progress=False)
    watcher = cls()
    stats = watcher.stats if cls is ActivationPlot else watcher
    learn.fit(2, cbs=[watcher, RemoveAt(watcher)])
    assert hooks_on(learn.model) == 0
    assert stats.n_batches == 2  # rows of the two batches before the removal, none after
    learn.fit(1)
    assert hooks_on(learn.model) == 0 and stats.n_batches == 2


@pytest.mark.parametrize("cls", [Profiler, ProfilePlot])
def test_a_profiler_removed_mid_fit_puts_the_plain_handlers_back(cls):
    learn = make_learner()
    profiler = cls()
    learn.fit(1, cbs=[profiler, RemoveAt(profiler)])
    plain = {event: tuple(handlers) for event, handlers in learn.cbh.handlers.items()}
    learn.cbh.rebuild()
    assert plain == learn.cbh.handlers
    assert all(getattr(h, "__self__", None) in learn.cbs for hs in plain.values() for h in hs)


def test_closing_a_removed_callback_reports_its_failure_by_name():
    class FailsToClose(Callback):
        def on_train_end(self):
            raise RuntimeError("cannot close")

    learn = make_learner()
    failing = FailsToClose()
    with pytest.raises(CallbackError, match="FailsToClose failed in on_train_end"):
        learn.fit(1, cbs=[failing, RemoveAt(failing)])
    assert [type(cb).__name__ for cb in learn.cbs] == ["Recorder", "ProgressCallback"]


def test_a_callback_attached_mid_epoch_is_called_from_the_next_batch():
    "A new handlers table on every add: no event of the newcomer is lost."
    class CountsZeroGrad(Callback):
        def __init__(self):
            self.iters = []

        def on_zero_grad_end(self):
            self.iters.append(self.learn.iter)

    counter = CountsZeroGrad()

    class AttachesAtBatch3(Callback):
        def on_batch_end(self):
            if self.learn.training and self.learn.epoch == 0 and self.learn.iter == 3:
                self.learn.add_cbs(counter)

    learn = make_learner()
    learn.fit(1, cbs=[AttachesAtBatch3()])
    assert counter.iters == list(range(4, len(learn.dls.train)))


def test_gradient_accumulation_under_ddp_syncs_the_window_s_last_backward():
    "The window's last batch all-reduces (DDP reads sync_grads at the forward): the ranks end as one model, one process's."
    ranks = launch(w.ddp_accumulated_params, nprocs=2, args=(2,))
    single = w.toy_learner(DeviceEngine("cpu"), cbs=[GradientAccumulation(2)])
    single.fit(2)
    for name, p in single.model.state_dict().items():
        assert torch.equal(ranks[0][name], ranks[1][name]), name
        assert (ranks[0][name] - p).abs().max() <= 1e-6, name
