"GAN training with the Learner (looplab.gan): freezing, switchers, mode coverage, resume in a new process, AMP."
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from looplab.callback import Callback, CallbackError
from looplab.data import DataLoaders, make_rings
from looplab.engine import AMPEngine
from looplab.gan import (AdaptiveGANSwitcher, FixedGANSwitcher, GANLoss, GANModule, GANPlot, GANTrainer, digit_grid,
                         gan_learner, ring_scatter, wgan_crit_loss, wgan_gen_loss)
from looplab.learner import Learner, set_seed
from looplab.widgets import LivePlotWarning, Throttle

from helpers import PNG

WORKER = Path(__file__).with_name("gan_worker.py")


def mlp(n_in, n_out, hidden=128):
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, n_out))


def ring_learner(preset="standard", switcher=None, cbs=None, engine=None, n=4096, seed=0, critic=None):
    set_seed(seed)
    real, _ = make_rings(n, std=0.1, seed=seed)
    dls = DataLoaders.from_tensors(real, torch.zeros(len(real)), bs=64, valid_pct=0.0)
    learn = gan_learner(mlp(2, 2), critic or mlp(2, 1), dls, preset=preset, switcher=switcher, cbs=cbs, engine=engine)
    learn.remove_cbs(learn.progress)
    return learn


class Snap(Callback):
    "For each real step: (gen_mode, generator unchanged, critic unchanged, the optimizer that stepped)."
    order = 50

    def __init__(self):
        self.rows = []

    def on_step_begin(self):
        self.before = [p.detach().clone() for p in self.learn.model.parameters()]

    def on_step_end(self):
        model = self.learn.model
        n_gen = len(list(model.generator.parameters()))
        same = [torch.equal(a, p) for a, p in zip(self.before, model.parameters())]
        name = [k for k, opt in self.learn.opts.items() if opt is self.learn.opt][0]
        self.rows.append((model.gen_mode, all(same[:n_gen]), all(same[n_gen:]), name))


@pytest.mark.parametrize("preset", ["standard", "wgan"])
def test_the_network_not_in_training_is_bit_identical_after_a_step(preset):
    snap = Snap()
    learn = ring_learner(preset, cbs=[snap], n=1024)
    learn.fit(1)
    assert set(snap.rows) == {(False, True, False, "critic"), (True, False, True, "generator")}
    assert learn.model.gen_mode  # after training, the module is in generator mode
    assert all(p.requires_grad for p in learn.model.parameters())


class Modes(Callback):
    order = 50

    def __init__(self):
        self.modes = []

    def on_step_end(self):
        self.modes.append("G" if self.learn.model.gen_mode else "C")


@pytest.mark.parametrize("n_crit,n_gen", [(1, 1), (5, 1), (3, 2), (2, 4)])
def test_fixed_switcher_makes_exactly_n_crit_then_n_gen_steps(n_crit, n_gen):
    modes = Modes()
    learn = ring_learner(switcher=FixedGANSwitcher(n_crit, n_gen), cbs=[modes], n=1024)
    learn.fit(1)
    expected = ("C" * n_crit + "G" * n_gen) * 16
    assert "".join(modes.modes) == expected[:len(modes.modes)] and len(modes.modes) == 16


def test_callable_counts_and_adaptive_switcher():
    modes = Modes()
    ring_learner(switcher=FixedGANSwitcher(lambda n_g: 3 if n_g < 2 else 1, lambda n_c: 1 + n_c // 100),
                 cbs=[modes], n=1024).fit(1)
    assert "".join(modes.modes) == "CCCGCCCGCGCGCGCG"
    modes = Modes()
    ring_learner(switcher=AdaptiveGANSwitcher(gen_thresh=-1.0, critic_thresh=None), cbs=[modes], n=1024).fit(1)
    assert "".join(modes.modes) == "CG" + "G" * 14  # the generator's loss never falls below -1: it keeps training


def modes_covered(generator, n=1000, std=0.1, radius=2.0, n_modes=8, seed=1):
    with torch.no_grad():
        fakes = generator(torch.randn(n, 2, generator=torch.Generator().manual_seed(seed)))
    angles = torch.arange(n_modes) * 2 * math.pi / n_modes
    centres = torch.stack([angles.cos(), angles.sin()], 1) * radius
    share = (torch.cdist(fakes, centres) < 3 * std).float().mean(0)
    return int((share >= 0.02).sum())


def test_seeded_ring_run_covers_at_least_6_of_8_modes_in_seconds():
    learn = ring_learner()
    start = time.perf_counter()
    learn.fit(30)
    seconds = time.perf_counter() - start
    covered = modes_covered(learn.model.generator)
    assert covered >= 6, f"{covered} modes covered"
    assert learn.model.gen_mode
    print(f"{covered} modes in {seconds:.1f}s")


def test_gan_under_amp_bfloat16_runs():
    learn = ring_learner(engine=AMPEngine(torch.bfloat16, device="cpu"), n=1024)
    learn.fit(2)
    trainer = learn.cbs[[type(c) for c in learn.cbs].index(GANTrainer)]
    assert len(trainer.gen_losses) == len(trainer.crit_losses) == 16
    assert all(math.isfinite(v) for _, v in trainer.gen_losses + trainer.crit_losses)


def test_bad_input_is_a_clear_error():
    for bad in (0, -3, 1.5, True):
        with pytest.raises(ValueError, match=rf"n_crit must be an int >= 1.*got {bad!r}"):
            FixedGANSwitcher(n_crit=bad)
    with pytest.raises(ValueError, match="n_gen must be"):
        FixedGANSwitcher(n_gen=0)
    learn = ring_learner(switcher=FixedGANSwitcher(lambda n_g: 0, 1), n=256)
    with pytest.raises(CallbackError, match=r"n_crit\(0\) must return an int >= 1, got 0"):
        learn.fit(1)
    learn = ring_learner(critic=nn.Linear(2, 3), n=256)
    with pytest.raises(ValueError, match=r"one score per item.*\(64, 3\)"):
        learn.fit(1)
    dls = DataLoaders.from_tensors(torch.randn(64, 2), torch.zeros(64), bs=32, valid_pct=0.0)
    plain = Learner(nn.Linear(2, 2), dls, cbs=[GANTrainer()])
    with pytest.raises(CallbackError, match="GANTrainer trains a looplab.gan.GANModule.*got Linear"):
        plain.fit(1)
    with pytest.raises(ValueError, match=r"preset must be one of \['standard', 'wgan'\], got 'dcgan'"):
        gan_learner(mlp(2, 2), mlp(2, 1), dls, preset="dcgan")
    with pytest.raises(ValueError, match="clip must be a number > 0, got -0.01"):
        GANTrainer(clip=-0.01)
    with pytest.raises(TypeError, match="clip must be a number or None"):
        GANTrainer(clip="0.01")
    model = GANModule(nn.Linear(2, 2), nn.Linear(2, 1))
    loss = GANLoss(wgan_gen_loss, wgan_crit_loss, model)
    model.switch(True)
    assert loss(model(torch.randn(5, 2)), None).ndim == 0


# --- GANPlot ---------------------------------------------------------------------------------------------------

def test_gan_plot_headless_draws_nothing_and_plots_after_training(tmp_path):
    real, _ = make_rings(512, std=0.1, seed=0)
    plot = GANPlot(ring_scatter(real), n_samples=100)
    with pytest.raises(ValueError, match="GANPlot has nothing to plot yet"):
        plot.plot()
    assert plot._repr_png_() is None
    learn = ring_learner(cbs=[plot], n=512)
    learn.fit(1)
    assert plot.live is None  # no frontend: nothing drawn during training
    fig = plot.plot()
    assert [ax.get_title() for ax in fig.axes] == ["GAN losses", f"samples after batch {learn.n_iter}"]
    assert plot.save(tmp_path / "gan.png").read_bytes()[:8] == PNG
    assert plot.samples().shape == (100, 2)


def test_gan_plot_widget_mode_redraws_the_whole_figure_and_leaves_the_run_alone(monkeypatch):
    monkeypatch.setattr(Throttle, "due", lambda self: True)
    plot = GANPlot(ring_scatter(make_rings(256, std=0.1, seed=0)[0]), n_samples=64, mode="widget")
    learn = ring_learner(cbs=[plot], n=512)
    learn.fit(1)
    alone = ring_learner(n=512)
    alone.fit(1)
    assert plot.live.n_draws == 8 + 1 and plot.live.n_full_draws == plot.live.n_draws  # nothing blitted
    assert plot.live.png[:8] == PNG
    assert all(torch.equal(a, b) for a, b in zip(learn.model.parameters(), alone.model.parameters()))  # fixed noise of its own


def test_gan_plot_a_failing_draw_warns_once_and_training_goes_on():
    def broken(ax, fakes):
        raise RuntimeError("cannot show these samples")

    plot = GANPlot(broken, mode="widget")
    learn = ring_learner(cbs=[plot], n=512)
    with pytest.warns(LivePlotWarning, match="GANPlot stopped drawing.*cannot show these samples") as record:
        learn.fit(2)
    assert len([w for w in record if w.category is LivePlotWarning]) == 1
    trainer = learn.cbs[[type(c) for c in learn.cbs].index(GANTrainer)]
    assert len(trainer.gen_losses) + len(trainer.crit_losses) == 16


def test_gan_plot_bad_input():
    with pytest.raises(TypeError, match="show_samples must be a function"):
        GANPlot("digits")
    with pytest.raises(ValueError, match="n_samples must be an int >= 1, got 0"):
        GANPlot(digit_grid, n_samples=0)
    with pytest.raises(ValueError, match="mode must be one of"):
        GANPlot(digit_grid, mode="tv")
    learn = Learner(nn.Linear(2, 2), DataLoaders.from_tensors(torch.randn(64, 2), torch.zeros(64), bs=32, valid_pct=0.0),
                    cbs=[GANPlot(digit_grid)])
    with pytest.raises(CallbackError, match="GANTrainer"):
        learn.fit(1)


def run_worker(out, *args):
    cmd = [sys.executable, str(WORKER), str(out), *map(str, args)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out, weights_only=True)


def test_gan_run_checkpointed_mid_run_resumes_bit_for_bit_in_a_new_process(tmp_path):
    stop_at = random.Random().randint(2, 30)  # 16 batches per epoch, 2 epochs
    whole = run_worker(tmp_path / "whole.pt")
    run_worker(tmp_path / "stopped.pt", "--stop-at", stop_at, "--ckpt", tmp_path / "ckpt.pt")
    resumed = run_worker(tmp_path / "resumed.pt", "--resume", tmp_path / "ckpt.pt")
    where = f"stopped after batch {stop_at}"
    assert all(torch.equal(a, b) for a, b in zip(whole["params"], resumed["params"])), where
    for name in ("generator", "critic"):
        assert all(torch.equal(a, b) for a, b in zip(whole["opts"][name], resumed["opts"][name])), where
    for key in ("gen_losses", "crit_losses", "losses"):
        assert torch.equal(whole[key], resumed[key]), (key, where)
    assert whole["switcher"] == resumed["switcher"] and whole["switcher"]["total_gen"] > 0
    assert whole["scaler"] == resumed["scaler"] and whole["scaler"]["scale"] != 2.0**10  # the scale moved
    assert whole["gen_mode"] and resumed["gen_mode"]
