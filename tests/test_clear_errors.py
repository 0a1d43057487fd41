"""Saves that say what they do, and errors that name their fix: a symbolic link written through, a hand-edited
checkpoint header, another model named by its keys, a DDP-wrapped `state_dict`, `learn.load(strict=False)`,
`SaveBestModel` and `SWA` removed mid-fit, a misspelt name at the top of the package, `LRPlot` on `fit(0)`, the LR
finder's suggestion in a script, and mixed precision asked of an engine written from `Engine`."""
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import looplab
from looplab.callback import Callback
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.checks import refuses
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.engine import DeviceEngine, Engine, EngineBase
from looplab.files import CheckpointError, read_checkpoint
from looplab.learner import Learner
from looplab.lr_plot import LRPlot
from looplab.monitor import SWA, SaveBestModel

ROOT = Path(__file__).resolve().parents[1]


def mlp_learner(*sizes, cbs=(), progress=False) -> Learner:
    "A seeded learner of linear layers of `sizes` (ReLU between them) on the digits."
    set_seed(0)
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    dls = DataLoaders.from_tensors(*load_digits(), bs=128, seed=0)
    return Learner(nn.Sequential(*layers[:-1]), dls, lr=0.1, cbs=list(cbs), progress=progress, opt_func=sgd_momentum)


def sgd_momentum(params, lr):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def user_warnings(fn) -> list[str]:
    "Call `fn`; the messages of the UserWarnings it gave."
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def params(learn) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learn.model.parameters()]


def same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


# A save to a symbolic link

@pytest.mark.parametrize("save", ["learn.save", "save_checkpoint"])
def test_a_save_to_a_symbolic_link_writes_through_it_and_the_link_stays(tmp_path, save):
    learn = mlp_learner(64, 10)
    learn.fit(1)
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "run-1.pt"
    target.write_bytes(b"old bytes")
    link = tmp_path / "latest.pt"
    link.symlink_to(target)
    if save == "learn.save":
        learn.save(link)
        loaded = torch.load(target, weights_only=True)
    else:
        save_checkpoint(learn, link)
        save_checkpoint(learn, link)  # the second keeps the first as .prev: beside the file, not the link
        loaded = read_checkpoint(link)["state"]["model"]
        assert (tmp_path / "runs" / "run-1.pt.prev").is_file() and not (tmp_path / "latest.pt.prev").exists()
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert same(loaded.values(), learn.model.state_dict().values())
    assert not list(tmp_path.glob("**/*.tmp"))


def test_a_chain_of_links_and_a_dangling_link_are_written_through(tmp_path):
    learn = mlp_learner(64, 10)
    target = tmp_path / "store" / "weights.pt"  # neither the file nor its folder exists yet
    (tmp_path / "middle.pt").symlink_to(target)
    (tmp_path / "front.pt").symlink_to(tmp_path / "middle.pt")
    learn.save(tmp_path / "front.pt")
    assert (tmp_path / "front.pt").is_symlink() and (tmp_path / "middle.pt").is_symlink() and target.is_file()
    fresh = mlp_learner(64, 10)
    fresh.load(tmp_path / "front.pt")
    assert same(params(fresh), params(learn))


def test_a_link_to_a_read_only_file_is_refused_and_both_stay(tmp_path):
    target = tmp_path / "kept.pt"
    target.write_bytes(b"old bytes")
    target.chmod(0o444)
    (tmp_path / "link.pt").symlink_to(target)
    try:
        refuses(lambda: mlp_learner(64, 10).save(tmp_path / "link.pt"), PermissionError, "read-only")
    finally:
        target.chmod(0o644)
    assert (tmp_path / "link.pt").is_symlink() and target.read_bytes() == b"old bytes"


# A checkpoint header edited by hand

@pytest.fixture
def run_file(tmp_path) -> Path:
    learn = mlp_learner(64, 10)
    learn.fit(1)
    return save_checkpoint(learn, tmp_path / "run.pt")


def edited(path: Path, **header) -> Path:
    ckpt = torch.load(path, weights_only=True)
    ckpt["header"].update(header)
    torch.save(ckpt, path.with_name("changed.pt"))
    return path.with_name("changed.pt")


@pytest.mark.parametrize("version", ["1", 1.0, None, 0, -3, True])
def test_a_format_version_no_looplab_writes_is_named_as_an_edit_with_what_to_put_back(run_file, version):
    message = refuses(lambda: read_checkpoint(edited(run_file, format_version=version)), CheckpointError,
                      f"format_version {version!r}", "edited by hand or damaged", "put back format_version 1")
    assert "upgrade" not in message


def test_a_higher_version_from_this_looplab_is_an_edit_and_from_a_newer_one_an_upgrade(run_file):
    message = refuses(lambda: read_checkpoint(edited(run_file, format_version=2)), CheckpointError,
                      "edited by hand or damaged", f"written by looplab {looplab.__version__}",
                      "put back format_version 1")
    assert "if this one comes from one, upgrade looplab" in message
    newer = refuses(lambda: read_checkpoint(edited(run_file, format_version=2, looplab_version="9.0.0")),
                    CheckpointError, "format_version 2, written by looplab 9.0.0", "upgrade looplab")
    assert "edited by hand" not in newer
    refuses(lambda: read_checkpoint(edited(run_file, sha256="abc")), CheckpointError, "sha256 is 'abc'",
            "64 hexadecimal")
    assert read_checkpoint(edited(run_file))["header"]["format_version"] == 1  # an untouched header still reads


# Another model's checkpoint, a DDP-wrapped state_dict, strict=False

def test_a_checkpoint_of_another_model_is_named_by_its_keys_not_the_optimizer_groups(tmp_path):
    learn = mlp_learner(64, 10)
    learn.fit(1)
    save_checkpoint(learn, tmp_path / "run.pt")
    deeper = mlp_learner(64, 10, 10)
    deeper.create_opt()  # group 0 has 4 parameters here, 2 in the file
    message = refuses(lambda: load_checkpoint(deeper, tmp_path / "run.pt"), CheckpointError,
                      "missing keys (in this model, not saved): 2.weight", "nothing was loaded")
    assert "group 0" not in message
    wider = mlp_learner(64, 16)
    refuses(lambda: load_checkpoint(wider, tmp_path / "run.pt"), CheckpointError, "0.weight (10, 64) (this model's (16, 64))")


@pytest.mark.parametrize("with_opt", [False, True])
def test_a_state_dict_of_a_ddp_wrapped_model_loads_without_its_prefix_and_says_so(tmp_path, with_opt):
    learn = mlp_learner(64, 32, 10)
    learn.fit(1)
    wrapped = {f"module.{key}": value for key, value in learn.model.state_dict().items()}
    optimizers = {name: opt.state_dict() for name, opt in learn.opts.items()}
    torch.save({"model": wrapped, "optimizers": optimizers} if with_opt else wrapped, tmp_path / "ddp.pt")
    fresh = mlp_learner(64, 32, 10)
    said = user_warnings(lambda: fresh.load(tmp_path / "ddp.pt", with_opt=with_opt))
    assert len(said) == 1 and "'module.'" in said[0] and "DistributedDataParallel" in said[0]
    assert same(params(fresh), params(learn))
    if with_opt:
        assert same(fresh.opt.state_dict()["state"][0].values(), learn.opt.state_dict()["state"][0].values())


def test_a_prefix_the_model_itself_has_is_left_alone(tmp_path):
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.module = nn.Linear(64, 10)
    learn = Learner(Holder(), DataLoaders.from_tensors(*load_digits(), bs=128), progress=False)
    learn.save(tmp_path / "own.pt")
    assert user_warnings(lambda: learn.load(tmp_path / "own.pt")) == []


def test_strict_false_loads_the_shared_keys_keeps_the_others_and_names_both(tmp_path):
    body = mlp_learner(64, 32)
    body.save(tmp_path / "body.pt")
    learn = mlp_learner(64, 32, 10)
    head = learn.model[2].weight.detach().clone()
    refuses(lambda: learn.load(tmp_path / "body.pt"), ValueError, "missing keys", "2.weight",
            "learn.load(path, strict=False)")
    said = user_warnings(lambda: learn.load(tmp_path / "body.pt", strict=False))
    assert len(said) == 1 and "loaded 2 of this model's 4 tensors" in said[0] and "2.weight, 2.bias" in said[0]
    assert torch.equal(learn.model[0].weight, body.model[0].weight) and torch.equal(learn.model[2].weight, head)
    extra = mlp_learner(64, 32, 10, 10)
    extra.save(tmp_path / "extra.pt")
    said = user_warnings(lambda: learn.load(tmp_path / "extra.pt", strict=False))
    assert "in the file and not in this model: 4.weight, 4.bias" in said[0]
    assert torch.equal(learn.model[2].weight, extra.model[2].weight)
    learn.fit(1)  # and it trains on


def test_strict_false_refuses_other_shapes_the_optimizers_and_a_non_bool(tmp_path):
    mlp_learner(64, 16).save(tmp_path / "narrow.pt")
    learn = mlp_learner(64, 32, 10)
    before = params(learn)
    refuses(lambda: learn.load(tmp_path / "narrow.pt", strict=False), ValueError, "0.weight (16, 64)", "drop it",
            "nothing was loaded")
    refuses(lambda: learn.load(tmp_path / "narrow.pt", with_opt=True, strict=False), ValueError,
            "with_opt=True, strict=False", "fits only the whole model")
    refuses(lambda: learn.load(tmp_path / "narrow.pt", strict=0), TypeError, "strict must be a bool", "0")
    assert same(params(learn), before)


# SaveBestModel and SWA removed in the middle of a fit

class ScriptedValidLoss(Callback):
    "Overwrites each epoch's valid loss, so that the best epoch is known: epoch 1."
    order = -5

    def on_epoch_end(self):
        self.learn.recorder.values[-1]["valid_loss"] = [0.5, 0.3, 0.4, 0.35][self.learn.epoch]


class WeightsAtEpochEnd(Callback):
    "The weights at each epoch's end."
    order = 12

    def __init__(self):
        self.weights = []

    def on_epoch_end(self):
        self.weights.append(params(self.learn))


class RemoveAt(Callback):
    "Removes `cb` after batch 3 of epoch 2, keeping the weights just before and just after."
    order = 50

    def __init__(self, cb):
        self.cb = cb

    def on_batch_end(self):
        if self.learn.training and (self.learn.epoch, self.learn.iter) == (2, 3):
            self.before = params(self.learn)
            self.learn.remove_cbs(self.cb)
            self.after = params(self.learn)


@pytest.mark.parametrize("make", [SaveBestModel, lambda: SWA(start_epoch=0, update_bn=False)],
                         ids=["SaveBestModel", "SWA"])
def test_removed_mid_fit_the_model_keeps_its_weights_and_a_warning_says_where_the_others_are(make):
    cb = make()
    remover = RemoveAt(cb)
    learn = mlp_learner(64, 32, 10, cbs=[ScriptedValidLoss()])
    said = user_warnings(lambda: learn.fit(4, cbs=[cb, remover]))
    assert same(remover.before, remover.after)
    assert len(said) == 1 and f"{type(cb).__name__} was removed in the middle of the fit" in said[0]
    assert "keeps its current weights" in said[0] and ("best_epoch 1" in said[0] or "average of 2 epochs" in said[0])
    reference = mlp_learner(64, 32, 10, cbs=[ScriptedValidLoss()])
    reference.fit(4)  # trained on from the current weights: the run without the callback at all
    assert same(params(learn), params(reference))


@pytest.mark.parametrize("make", [SaveBestModel, lambda: SWA(start_epoch=0, update_bn=False)],
                         ids=["SaveBestModel", "SWA"])
def test_at_the_fits_end_the_best_or_averaged_weights_are_still_loaded_without_a_word(make):
    cb = make()
    seen = WeightsAtEpochEnd()
    learn = mlp_learner(64, 32, 10, cbs=[ScriptedValidLoss(), seen])
    assert user_warnings(lambda: learn.fit(4, cbs=[cb])) == []
    assert not same(params(learn), seen.weights[-1])  # the best (epoch 1) or the average, not the last epoch's
    if isinstance(cb, SaveBestModel):
        assert same(params(learn), seen.weights[1])


# The top of the package

def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_a_misspelt_name_in_a_from_import_gets_the_close_names():
    done = run_python("from looplab import Lerner")
    assert done.returncode == 1
    assert "ImportError: cannot import name 'Lerner' from 'looplab'; did you mean 'Learner'" in done.stderr
    refuses(lambda: looplab.fit_one_cylce, AttributeError, "did you mean 'fit_one_cycle'")
    refuses(lambda: looplab.DeviceEngin, AttributeError, "did you mean 'DeviceEngine'")
    assert getattr(looplab, "Lerner", "absent") == "absent" and not hasattr(looplab, "plainly_not_a_name")
    done = run_python("from looplab import fsdp, gan_panels; from looplab import *; print(sorted(dir())[:1])")
    assert done.returncode == 0, done.stderr


def test_fsdp_engine_and_every_engine_to_train_with_are_in_all():
    sharding = looplab._fsdp_runs_here()  # torch 2.6 on: the floor run (torch 2.4) has no FSDPEngine to offer
    assert ("FSDPEngine" in looplab.__all__) == sharding
    if sharding:
        assert looplab.FSDPEngine is importlib.import_module("looplab.fsdp").FSDPEngine
    bases = {"EngineBase", "Engine", "ProcessGroupEngine"}  # written from, not trained with
    engines = set()
    for module in ("engine", "engines", *(["fsdp"] if sharding else [])):
        found = importlib.import_module(f"looplab.{module}")
        engines.update(n for n in found.__all__ if isinstance(getattr(found, n), type)
                       and issubclass(getattr(found, n), EngineBase))
    assert engines - bases <= set(looplab.__all__), sorted(engines - bases - set(looplab.__all__))


def test_every_public_name_bound_at_the_top_is_in_all_and_every_name_of_all_is_served():
    import types
    bound = {n for n, v in vars(looplab).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert bound <= set(looplab.__all__), sorted(bound - set(looplab.__all__))
    assert all(getattr(looplab, n) is not None for n in looplab.__all__) and set(looplab.__all__) <= set(dir(looplab))


# LRPlot on fit(0), the LR finder in a script

@pytest.mark.parametrize("plan", ["sched_fn", "scheduler", "mom_fn"])
def test_lr_plot_on_a_fit_of_no_epoch_trains_nothing_and_plans_nothing(plan):
    given = {"sched_fn": lambda pct: 0.1 * (1 - pct), "mom_fn": lambda pct: 0.9,
             "scheduler": lambda opt: torch.optim.lr_scheduler.LinearLR(opt, total_iters=5)}
    learn = mlp_learner(64, 10)
    learn.opt_func = lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9)
    lr_plot = LRPlot(**{plan: given[plan]}, mode="text")
    learn.fit(0, cbs=lr_plot)
    assert learn.n_steps == 0 and lr_plot._summary() == "no training step" and not any(lr_plot.planned.values())
    learn.fit(1, cbs=lr_plot)  # then a real fit plans its steps
    assert len(next(iter({**lr_plot.planned["lr"], **lr_plot.planned["mom"]}.values()))) == len(learn.dls.train)


SCRIPT = """
from torch import nn
from looplab import DataLoaders, Learner, load_digits, lr_find, set_seed
set_seed(0)
learn = Learner(nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)),
                DataLoaders.from_tensors(*load_digits(), bs=128, seed=0), lr=0.1, progress={progress})
found = lr_find(learn)
print(f"returned {{found.suggestion:.3g}}")
"""


def test_lr_find_in_a_script_prints_its_suggestion_after_the_table_and_nothing_in_silence():
    done = run_python(SCRIPT.format(progress=True))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    returned = lines[-1].split()[-1]
    assert "train_loss" in lines[0] and lines[-2].startswith(f"lr_find: suggested lr_max {returned} (steep; min/10: ")
    silent = run_python(SCRIPT.format(progress=False))
    assert silent.stdout.splitlines() == [f"returned {returned}"], silent.stdout


# Mixed precision asked of an engine written from Engine

class FromEngine(Engine):
    "An engine written from `Engine`: the six tensor methods (borrowed), and no word on precision."
    sync_device = DeviceEngine.sync_device
    sync_tensor = DeviceEngine.sync_tensor
    autocast = DeviceEngine.autocast
    backward_loss = DeviceEngine.backward_loss
    optimizer_step = DeviceEngine.optimizer_step
    zero_grad = DeviceEngine.zero_grad


@pytest.mark.parametrize("ask, dtype", [("to_fp16", "torch.float16"), ("to_bf16", "torch.bfloat16")])
def test_mixed_precision_of_an_engine_written_from_engine_names_the_fix_and_changes_nothing(ask, dtype):
    learn = mlp_learner(64, 10)
    learn.engine = FromEngine("cpu")
    refuses(lambda: getattr(learn, ask)(), ValueError, f"FromEngine does not say how to train in {dtype}",
            "with_precision(self, dtype)", "DeviceEngine", "Learner(engine=...)")
    assert type(learn.engine) is FromEngine
    learn.fit(1)  # the engine of one's own still trains in full precision
