"""A resume is never lost, and a callback runs once per event: a fit refused before the paused run is restored leaves
it pending, exactly as it was (on one process and under DDP); a fit of fewer epochs than the run has done is refused
with the numbers; a checkpoint is not written while a loaded run waits; the same callback instance is refused twice
in one learner, and a learner refuses one that another learner took."""
from functools import partial

import pytest
import torch
from torch import nn

import dist_workers as w
from helpers import SaveAt, digits_learner
from looplab.callback import Callback, CallbackError, CancelFitException
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.distributed import launch
from looplab.engines import DistributedDataParallelEngine
from looplab.schedule import TorchScheduler

torch.set_num_threads(1)


def dropout_model():
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 10))


def learner(cbs=(), **save):
    "Digits (23 shuffled batches an epoch), dropout, momentum, `cbs` and a `SaveAt(**save)` (which may never save)."
    return digits_learner(dropout_model, seed=0, cbs=[*cbs, SaveAt(**save)])


class Begins(Callback):
    "Part of every run here; its `on_train_begin` raises `error` when one is set (a refusal inside the fit's start)."
    error = None

    def on_train_begin(self):
        if self.error is not None:
            raise self.error


def the_same(a, b) -> None:
    "Assert that two learners hold the same run: weights, optimizer state and settings, counters, history."
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    sa, sb = a.opt.state_dict(), b.opt.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert all(torch.equal(sa["state"][k]["momentum_buffer"], sb["state"][k]["momentum_buffer"]) for k in sa["state"])
    assert (a.n_iter, a.n_steps, a.position) == (b.n_iter, b.n_steps, b.position)
    assert a.recorder.losses == b.recorder.losses and a.recorder.hypers == b.recorder.hypers


def linear_warmup():
    "A scheduler whose construction writes LR 0.025 (not 0.1) into the optimizer, and adds initial_lr."
    return TorchScheduler(lambda opt: torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=5))


def refused_fit(learn, how: str):
    "A fit that ends before the paused run is restored, in one of the ways a fit's start can end."
    if how == "other callbacks":
        with pytest.raises(ValueError, match="attach the same callbacks"):
            learn.fit(3, lr=0.5, cbs=[linear_warmup()])
        return
    begins = next(cb for cb in learn.cbs if isinstance(cb, Begins))
    begins.error = {"a callback fails": ValueError("no"), "Stop": KeyboardInterrupt(),
                    "cancelled": CancelFitException()}[how]
    if how == "a callback fails":
        with pytest.raises(CallbackError, match="Begins failed in on_train_begin"):
            learn.fit(3, cbs=[linear_warmup()])
    elif how == "Stop":
        with pytest.raises(KeyboardInterrupt, match="outside the epochs"):
            learn.fit(3, cbs=[linear_warmup()])
    else:
        learn.fit(3, cbs=[linear_warmup()])
    begins.error = None


@pytest.mark.parametrize("pause", [dict(epoch=0), dict(n_iter=30)], ids=["epoch end", "mid-epoch"])
@pytest.mark.parametrize("how", ["other callbacks", "a callback fails", "Stop", "cancelled"])
def test_a_fit_refused_before_the_restore_keeps_the_resume_exactly(tmp_path, pause, how):
    "Refused, failed, stopped or cancelled before the restore: the resume is pending, and the next fit is exact."
    uninterrupted = learner([Begins()])
    uninterrupted.fit(3)
    learner([Begins()], path=tmp_path / "run.pt", **pause).fit(3)
    resumed = learner([Begins()])
    torch.manual_seed(999)  # a new process's generators
    load_checkpoint(resumed, tmp_path / "run.pt")
    where = resumed.position
    refused_fit(resumed, how)
    assert resumed.resuming and resumed.position == where
    assert [set(g) for g in resumed.opt.param_groups] == [set(g) for g in uninterrupted.opt.param_groups]
    assert resumed.opt.param_groups[0]["lr"] == 0.1  # neither fit's lr=0.5 nor the scheduler's 0.025
    assert len(resumed.cbs) == 3  # the Recorder, Begins and SaveAt: the fit's callbacks are detached
    resumed.fit(3)
    assert not resumed.resuming
    the_same(resumed, uninterrupted)


def test_before_the_fix_a_refused_fit_used_the_resume_up(tmp_path):
    "The issue's case: saved after a fit, refused with a scheduler; `fit(3)` then continues, not from epoch 0."
    uninterrupted = learner()
    uninterrupted.fit(3)
    first = learner()
    first.fit(2)
    save_checkpoint(first, tmp_path / "run.pt")
    resumed = learner()
    load_checkpoint(resumed, tmp_path / "run.pt")
    with pytest.raises(ValueError, match="attach the same callbacks"):
        resumed.fit(3, cbs=[linear_warmup()])
    resumed.fit(3)
    assert resumed.n_iter == uninterrupted.n_iter == 69  # not 46 + 69
    the_same(resumed, uninterrupted)


@pytest.mark.parametrize("n_epochs, done", [(2, "3 epochs"), (0, "3 epochs")])
def test_a_fit_of_fewer_epochs_than_the_run_has_done_is_refused_and_keeps_the_resume(tmp_path, n_epochs, done):
    "`fit(2)` after a checkpoint of epoch 3 would train nothing: refused with the numbers and the fix, nothing changed."
    uninterrupted = learner()
    uninterrupted.fit(4)
    learner(path=tmp_path / "run.pt", epoch=2).fit(4)
    resumed = learner()
    load_checkpoint(resumed, tmp_path / "run.pt")
    before = [p.clone() for p in resumed.model.parameters()]
    with pytest.raises(ValueError, match=rf"fit\(n_epochs={n_epochs}\) would train nothing: the run it resumes has "
                                         rf"done {done}, .* Call fit\(4\) or more .* learn.set_position\(0, 0\)"):
        resumed.fit(n_epochs)
    assert resumed.resuming and resumed.position == (3, 0) and resumed.n_iter == 69
    assert all(torch.equal(a, b) for a, b in zip(before, resumed.model.parameters()))
    resumed.fit(4)
    the_same(resumed, uninterrupted)


def test_mid_epoch_counts_the_started_epoch_and_a_finished_run_only_restores(tmp_path):
    "Paused in epoch 3: `fit(3)` is refused (3 epochs and 5 batches done); paused after epoch 3, `fit(3)` restores."
    learner(path=tmp_path / "mid.pt", n_iter=3 * 23 + 5).fit(4)
    resumed = learner()
    load_checkpoint(resumed, tmp_path / "mid.pt")
    with pytest.raises(ValueError, match="has done 3 epochs and 5 batches of the next, .* Call fit\\(4\\)"):
        resumed.fit(3)
    assert resumed.resuming and resumed.position == (3, 5)
    finished = learner()
    finished.fit(3)
    save_checkpoint(finished, tmp_path / "done.pt")
    again = learner()
    load_checkpoint(again, tmp_path / "done.pt")
    again.fit(3)  # the script that resumes, run once more after its run ended: nothing to train, no error
    assert not again.resuming and again.n_iter == 69
    the_same(again, finished)


def test_set_position_drops_the_resume_for_a_new_run_from_the_loaded_weights(tmp_path):
    "The fix the refusal names: a new run of two epochs, starting at epoch 0 from the loaded weights."
    first = learner()
    first.fit(3)
    save_checkpoint(first, tmp_path / "run.pt")
    again = learner()
    load_checkpoint(again, tmp_path / "run.pt")
    again.set_position(0, 0)
    again.fit(2)
    assert again.n_iter == 69 + 46 and again.position == (2, 0)


def test_a_checkpoint_is_refused_while_a_loaded_run_waits(tmp_path):
    "The waiting run's callbacks and generators are restored by fit: a file written before would lose them."
    learner(path=tmp_path / "run.pt", n_iter=30).fit(3)
    resumed = learner()
    load_checkpoint(resumed, tmp_path / "run.pt")
    with pytest.raises(ValueError, match="waits to resume the run it loaded.*copy the file that was loaded"):
        save_checkpoint(resumed, tmp_path / "copy.pt")
    with pytest.raises(ValueError, match="attach the same callbacks"):
        resumed.fit(3, cbs=[linear_warmup()])
    with pytest.raises(ValueError, match="waits to resume"):
        save_checkpoint(resumed, tmp_path / "copy.pt")
    assert not (tmp_path / "copy.pt").exists()
    resumed.fit(3)
    save_checkpoint(resumed, tmp_path / "after.pt")


class Count(Callback):
    "Counts the events it sees, and the learners it saw them on."
    def __init__(self):
        self.events = 0
        self.learners = set()

    def on_batch_begin(self):
        self.events += 1
        self.learners.add(id(self.learn))

    on_train_begin = on_batch_end = on_epoch_end = on_batch_begin


def test_the_same_callback_twice_is_refused_before_the_first_event():
    "`fit(cbs=[c, c])`, `add_cbs(c)` then `fit(cbs=[c])`, `Learner(cbs=[c])` then `fit(cbs=[c])`: refused, c kept."
    c = Count()
    learn = learner()
    with pytest.raises(ValueError, match=r"Count\(order=0\) is already attached, or given twice.*pass it once"):
        learn.fit(1, cbs=[c, c])
    assert c.events == 0 and learn.n_iter == 0 and not any(cb is c for cb in learn.cbs)
    learn.add_cbs(c)
    with pytest.raises(ValueError, match=r"leave them out of fit\(cbs=...\)"):
        learn.fit(1, cbs=[c])
    with pytest.raises(ValueError, match="already attached"):
        learn.add_cbs(Count(), c)
    assert c.events == 0 and [cb for cb in learn.cbs if isinstance(cb, Count)] == [c]  # kept, and alone
    learn.fit(1)
    assert c.events == 1 + 2 * 23 + 6 + 1  # once per event: train begin, 23 batches, 6 validation batches, epoch end
    built_with = learner([c])
    with pytest.raises(ValueError, match="already attached"):
        built_with.fit(1, cbs=[c])


def test_a_callback_added_twice_mid_fit_is_refused():
    "A callback that adds an attached instance again in the middle of a fit: refused there, named with its event."
    class AddsAgain(Callback):
        def on_batch_begin(self):
            self.learn.add_cbs(self)
    with pytest.raises(CallbackError, match="AddsAgain failed in on_batch_begin: ValueError: .*already attached"):
        learner([AddsAgain()]).fit(1)


def test_a_callback_taken_by_another_learner_is_refused_by_the_first():
    "One instance on two learners follows the last: the first refuses to run it, naming the fix."
    c = Count()
    first = learner([c])
    second = learner()
    second.add_cbs(c)
    for refused in (lambda: first.fit(1), first.validate):
        with pytest.raises(ValueError, match=r"Count\(order=0\) was added to another learner after this one.*"
                                             r"own Count, or take it back with learn.remove_cbs\(cb\)"):
            refused()
    assert c.events == 0 and first.n_iter == 0
    second.fit(1)
    assert c.learners == {id(second)}
    first.remove_cbs(c)
    first.add_cbs(c)
    first.fit(1)
    assert c.learners == {id(second), id(first)}
    with pytest.raises(ValueError, match="added to another learner"):
        second.fit(1)


def test_a_notebook_cell_run_again_builds_a_new_learner_from_the_same_callbacks():
    "The old learner is never used again: building the new one from the same instances is not refused."
    cbs = [Count()]
    learner(cbs)
    again = learner(cbs)
    again.fit(1)
    assert cbs[0].learners == {id(again)}


def ddp_refusals_keep_the_run(ckpt):
    "Under DDP: the uninterrupted run; a run saved in epoch 1; loaded, two fits refused at once, then resumed."
    engine = partial(DistributedDataParallelEngine, device="cpu")
    uninterrupted = w.toy_learner(engine(), cbs=[SaveAt()])
    uninterrupted.fit(2)
    w.toy_learner(engine(), cbs=[SaveAt(ckpt, n_iter=8)]).fit(2)
    resumed = w.toy_learner(engine(), cbs=[SaveAt()])
    load_checkpoint(resumed, ckpt)
    c = Count()
    messages = []
    for refused in (lambda: resumed.fit(1), lambda: resumed.fit(2, cbs=[c, c])):
        try:
            refused()
        except ValueError as e:
            messages.append(str(e))
    resumed.fit(2)
    same = all(torch.equal(a, b) for a, b in zip(uninterrupted.model.parameters(), resumed.model.parameters()))
    return messages, same, resumed.n_iter, uninterrupted.n_iter


def ddp_other_callbacks(ckpt):
    "Under DDP: the saved run, loaded and fitted with other callbacks; the message, and whether the group lives on."
    resumed = w.toy_learner(DistributedDataParallelEngine(device="cpu"), cbs=[SaveAt()])
    load_checkpoint(resumed, ckpt)
    try:
        resumed.fit(2, cbs=[linear_warmup()])
    except ValueError as e:
        return str(e), torch.distributed.is_initialized()


def test_under_ddp_the_refusals_before_the_first_batch_keep_the_run(tmp_path):
    "Two gloo processes: refused before the model is wrapped, the resume and the group live on; refused after, both end."
    results = launch(ddp_refusals_keep_the_run, nprocs=2, args=(tmp_path / "ddp.pt",))
    for messages, same, n_iter, expected in results:
        assert len(messages) == 2
        assert "has done 1 epoch and 2 batches of the next" in messages[0] and "already attached" in messages[1]
        assert same and n_iter == expected == 12
    for message, group_alive in launch(ddp_other_callbacks, nprocs=2, args=(tmp_path / "ddp.pt",)):
        assert "attach the same callbacks" in message and not group_alive
