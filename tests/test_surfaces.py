"""Hostile files and inputs at the kit's edges: paths (`~`, devices, read-only files, a full disk), what the
restricted unpickler refuses, the three file formats and plain torch, checkpoints from inside a fit, closures taken
by keyword, and inference over streams and batches of three parts."""
import errno
import io
import os
import pickle
from functools import partial

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import looplab.files
from helpers import digits_learner
from looplab.callback import Callback, CallbackError
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.data import DataLoaders
from looplab.files import CheckpointError, atomic_save, read_checkpoint, read_weights
from looplab.learner import Learner
from looplab.monitor import SaveBestModel


def mlp():
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


# --- paths -----------------------------------------------------------------------------------------------------

def test_a_tilde_path_is_the_home_folder_not_a_folder_named_tilde(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    learn = digits_learner(mlp, seed=0)
    written = learn.save("~/w.pt")
    assert written == tmp_path / "w.pt" and written.is_file()
    assert not (tmp_path / "~").exists()
    learn.load("~/w.pt")
    save_checkpoint(learn, "~/run.pt")
    assert (tmp_path / "run.pt").is_file() and not (tmp_path / "~").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_saving_onto_a_pipe_or_device_is_refused_and_it_stays_what_it_was(tmp_path):
    "A named pipe stands in for a device such as /dev/null: the same rename would replace either with a file."
    import stat
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    learn = digits_learner(mlp, seed=0)
    for save in (learn.save, partial(save_checkpoint, learn), partial(atomic_save, {"a": 1})):
        with pytest.raises(ValueError, match="not a regular file"):
            save(pipe)
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary file left


def test_saving_over_a_read_only_file_is_refused_and_it_is_unchanged(tmp_path):
    learn = digits_learner(mlp, seed=0)
    locked = tmp_path / "locked.pt"
    locked.write_bytes(b"keep me")
    locked.chmod(0o444)
    for save in (learn.save, partial(save_checkpoint, learn), partial(atomic_save, {"a": 1})):
        with pytest.raises(PermissionError, match="read-only.*chmod u\\+w"):
            save(locked)
    assert locked.read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked.pt"]  # no temporary file left


def test_a_path_under_a_file_names_the_file(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        digits_learner(mlp, seed=0).save(tmp_path / "file" / "w.pt")


class FullDisk(io.FileIO):
    "A file on a disk that fills after 1,000 bytes."
    def write(self, data):
        if self.tell() + len(data) > 1000:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def test_a_full_disk_is_named_the_old_file_is_kept_and_no_temporary_file_is_left(tmp_path, monkeypatch):
    path = tmp_path / "w.pt"
    atomic_save({"w": torch.zeros(3)}, path)
    monkeypatch.setattr(looplab.files, "open", lambda p, mode: FullDisk(p, mode), raising=False)
    with pytest.raises(OSError, match="the disk is full") as info:
        atomic_save({"w": torch.ones(100_000)}, path)
    assert info.value.errno == errno.ENOSPC and "enforce fail" not in str(info.value)
    monkeypatch.undo()
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.zeros(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.pt"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_file_says_so_not_damaged(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"w": torch.zeros(2)}, path)
    path.chmod(0o000)
    with pytest.raises(PermissionError, match="cannot be read.*chmod u\\+r"):
        read_weights(path)


def test_an_unreadable_file_says_so_even_as_root(tmp_path, monkeypatch):
    path = tmp_path / "w.pt"
    torch.save({"w": torch.zeros(2)}, path)

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
    monkeypatch.setattr(looplab.files.torch, "load", denied)
    for read in (read_weights, read_checkpoint):
        with pytest.raises(PermissionError, match="cannot be read \\(Permission denied\\)") as info:
            read(path)
        assert "damaged" not in str(info.value)


# --- what the restricted unpickler refuses ------------------------------------------------------------------------

class RunsCode:
    def __reduce__(self):
        return (os.system, ("echo this ran while loading",))


@pytest.mark.parametrize("read", [read_weights, read_checkpoint])
def test_a_pickle_that_would_run_code_is_refused_as_such_not_as_damaged(tmp_path, read):
    path = tmp_path / "evil.pt"
    torch.save({"model": {"w": torch.zeros(1)}, "x": RunsCode()}, path)
    with pytest.raises(CheckpointError) as info:
        read(path)
    message = str(info.value)
    assert "system" in message and "run code" in message and "refused" in message
    assert "damaged" not in message and "likely succeed" not in message and "In PyTorch 2.6" not in message


def test_a_file_written_by_pickle_dump_is_named_and_an_empty_one_too(tmp_path):
    pickle.dump({"w": [1.0]}, open(tmp_path / "p.pt", "wb"))
    with pytest.raises(CheckpointError, match="pickle.dump, not torch.save"):
        read_weights(tmp_path / "p.pt")
    (tmp_path / "e.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="is empty"):
        read_weights(tmp_path / "e.pt")
    (tmp_path / "t.pt").write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="truncated or damaged, or was not written by torch.save"):
        read_weights(tmp_path / "t.pt")


# --- three files, one rule: plain torch and the kit exchange them -------------------------------------------------

def test_learn_save_writes_what_plain_torch_loads_in_the_obvious_line(tmp_path):
    learn = digits_learner(mlp, seed=0)
    learn.fit(1)
    learn.save(tmp_path / "w.pt")
    plain = mlp()
    plain.load_state_dict(torch.load(tmp_path / "w.pt"))  # no looplab, torch's defaults
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), learn.model.parameters()))
    learn.save(tmp_path / "both.pt", with_opt=True)
    plain.load_state_dict(torch.load(tmp_path / "both.pt")["model"])  # fastai's layout
    assert set(torch.load(tmp_path / "both.pt")) == {"model", "optimizers"}


def test_learn_load_reads_a_plain_state_dict_and_what_save_best_model_writes(tmp_path):
    source = mlp()
    torch.save(source.state_dict(), tmp_path / "torch.pt")
    learn = digits_learner(mlp, seed=1)
    learn.load(tmp_path / "torch.pt")
    assert all(torch.equal(a, b) for a, b in zip(source.parameters(), learn.model.parameters()))
    with pytest.raises(ValueError, match="holds no optimizer state"):
        learn.load(tmp_path / "torch.pt", with_opt=True)
    best = SaveBestModel(path=tmp_path / "best.pt")
    trained = digits_learner(mlp, seed=0, cbs=best)
    trained.fit(2)
    fresh = digits_learner(mlp, seed=3)
    fresh.load(tmp_path / "best.pt")  # refused before: SaveBestModel wrote a format learn.load did not read
    assert all(torch.equal(a, b) for a, b in zip(fresh.model.state_dict().values(), best.weights.values()))
    with pytest.raises(CheckpointError, match="a model's weights.*learn.load"):
        load_checkpoint(fresh, tmp_path / "best.pt")


def test_learn_load_takes_the_weights_and_optimizers_of_a_run_checkpoint(tmp_path):
    learn = digits_learner(mlp, seed=0)
    learn.fit(1)
    save_checkpoint(learn, tmp_path / "run.pt")
    fresh = digits_learner(mlp, seed=2)
    fresh.load(tmp_path / "run.pt", with_opt=True)
    assert all(torch.equal(a, b) for a, b in zip(fresh.model.parameters(), learn.model.parameters()))
    assert torch.equal(next(iter(fresh.opt.state.values()))["momentum_buffer"],
                       next(iter(learn.opt.state.values()))["momentum_buffer"])


def test_a_file_that_holds_no_weights_is_refused_by_name(tmp_path):
    torch.save({"epoch": 3, "notes": "no tensors"}, tmp_path / "x.pt")
    with pytest.raises(CheckpointError, match="neither a model's state_dict"):
        digits_learner(mlp, seed=0).load(tmp_path / "x.pt")


# --- checkpoints from inside a fit ---------------------------------------------------------------------------------

class CallAt(Callback):
    "Call `fn(learn)` in `event`, once, and remember what it raised."
    def __init__(self, event, fn):
        self.fn, self.error = fn, None
        setattr(self, event, self._call)

    def _call(self):
        if self.error is None:
            try:
                self.fn(self.learn)
                self.error = "none"
            except Exception as e:
                self.error = e


@pytest.mark.parametrize("event", ["on_batch_begin", "on_loss_begin", "on_backward_begin", "on_backward_end",
                                   "on_step_begin", "on_step_end"])
def test_save_checkpoint_inside_a_training_batch_is_refused_it_would_not_resume_exactly(tmp_path, event):
    cb = CallAt(event, lambda learn: save_checkpoint(learn, tmp_path / "mid.pt"))
    learn = digits_learner(mlp, seed=0, cbs=cb)
    learn.fit(1)
    assert isinstance(cb.error, ValueError) and "in the middle of training batch 0" in str(cb.error)
    assert "on_batch_end" in str(cb.error) and not (tmp_path / "mid.pt").exists()


@pytest.mark.parametrize("event", ["on_batch_end", "on_epoch_end", "on_epoch_begin"])
def test_save_checkpoint_between_batches_resumes_as_the_uninterrupted_run(tmp_path, event):
    cb = CallAt(event, lambda learn: save_checkpoint(learn, tmp_path / "ok.pt"))
    learn = digits_learner(mlp, seed=0, cbs=cb)
    learn.fit(2)
    assert cb.error == "none"
    resumed = digits_learner(mlp, seed=5, cbs=CallAt(event, lambda learn: None))  # the same callbacks
    load_checkpoint(resumed, tmp_path / "ok.pt")
    resumed.fit(2)
    assert all(torch.equal(a, b) for a, b in zip(resumed.model.parameters(), learn.model.parameters()))


def test_load_checkpoint_from_a_callback_during_fit_is_refused_and_the_fit_trains_on(tmp_path):
    learn = digits_learner(mlp, seed=0)
    learn.fit(1)
    save_checkpoint(learn, tmp_path / "run.pt")
    cb = CallAt("on_epoch_end", lambda learn: load_checkpoint(learn, tmp_path / "run.pt"))
    learn.add_cbs(cb)
    n_iter = learn.n_iter
    learn.fit(1)
    assert isinstance(cb.error, RuntimeError) and "while the learner runs" in str(cb.error)
    assert "CancelFitException" in str(cb.error)
    learn.remove_cbs(cb)
    learn.fit(1)
    assert learn.n_iter == n_iter + 2 * 23  # both fits trained every batch


# --- closures, inference ------------------------------------------------------------------------------------------

class KeywordClosureSGD(torch.optim.SGD):
    "An optimizer whose step takes the closure by keyword only, and needs it."
    def step(self, *, closure):
        with torch.enable_grad():
            loss = closure()
        super().step()
        return loss


def test_an_optimizer_taking_its_closure_by_keyword_is_called_by_keyword():
    learn = digits_learner(mlp, seed=0, opt_func=KeywordClosureSGD)
    learn.fit(1)
    plain = digits_learner(mlp, seed=0, opt_func=torch.optim.SGD)
    plain.fit(1)
    assert learn.n_steps == plain.n_steps == 23  # its closure gave back the batch's loss: the same steps as SGD's
    assert all(torch.equal(a, b) for a, b in zip(learn.model.parameters(), plain.model.parameters()))


class Stream(IterableDataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __iter__(self):
        return iter(zip(self.x, self.y))


def test_predict_and_get_preds_over_loaders_of_an_iterable_dataset():
    x, y = torch.randn(40, 4), torch.randint(0, 2, (40,))
    dls = DataLoaders(DataLoader(Stream(x, y), batch_size=8), DataLoader(Stream(x, y), batch_size=8))
    learn = Learner(nn.Linear(4, 2), dls, progress=False)
    assert learn.predict(x[0]).shape == (2,)
    preds, targets = learn.get_preds()
    assert preds.shape == (40, 2) and torch.equal(targets, y)


def test_batches_of_three_parts_name_the_batch_rule_and_split_batch():
    x, y, w = torch.randn(40, 4), torch.randint(0, 2, (40,)), torch.rand(40)
    dl = DataLoader(TensorDataset(x, y, w), batch_size=8)
    learn = Learner(nn.Linear(4, 2), DataLoaders(dl, dl), progress=False)
    for call in (learn.get_preds, partial(learn.predict, (x[0], y[0], w[0]))):
        with pytest.raises(TypeError, match="batch rule.*split_batch=lambda batch") as info:
            call()
        assert "the model failed on" in str(info.value)
    fixed = Learner(nn.Linear(4, 2), DataLoaders(dl, dl), progress=False, split_batch=lambda b: (b[0], b[1]))
    assert fixed.get_preds()[0].shape == (40, 2)


def test_importing_the_learner_pays_for_torch_optims_first_build_so_a_fit_shows_its_plot_at_once():
    import subprocess
    import sys
    code = ("import sys, time; import looplab.learner; assert 'torch._dynamo' in sys.modules; import torch; "
            "t = time.perf_counter(); torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1); "
            "print(time.perf_counter() - t)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("kwargs, error, fragment", [
    ({"figsize": 5}, TypeError, "figsize must be None or (width, height)"),
    ({"figsize": (7, 0)}, ValueError, "figsize[1]"),
    ({"dpi": 0}, ValueError, "dpi must be an int >= 1"),
    ({"file": "out.txt"}, TypeError, "file must be None (standard output) or an open text file"),
])
def test_every_live_plot_checks_its_figure_and_file_when_built(kwargs, error, fragment):
    from looplab.gan_images import GANPlot
    from looplab.loss_plot import LossPlot
    from looplab.lr_plot import LRPlot
    from looplab.profiler import ProfilePlot
    for plot in (LossPlot, LRPlot, ProfilePlot, partial(GANPlot, lambda ax: None)):
        with pytest.raises(error) as info:
            plot(**kwargs)
        assert fragment in str(info.value), plot
