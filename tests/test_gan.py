"GAN training (looplab.gan, looplab.gan_images): freezing, switchers, mode coverage, resume in a new process, AMP."
import io
import math
import random
import re
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from looplab.callback import Callback, CallbackError
from looplab.data import DataLoaders, make_rings, set_seed
from looplab.engine import AMPEngine
from looplab.gan import (AdaptiveGANSwitcher, FixedGANSwitcher, GANLoss, GANModule, GANProgress, GANTrainer,
                         gan_learner, mode_shares, ring_learner, ring_mlp, ring_scatter, samples, wgan_crit_loss,
                         wgan_gen_loss)
from looplab.gan_images import DCGANTrainer, GANColumns, GANPlot, digit_grid
from looplab.learner import Learner
from looplab.widgets import LivePlotWarning, Throttle

from helpers import PNG, run_worker

WORKER = Path(__file__).with_name("gan_worker.py")


def with_critic(critic, preset="standard"):
    "The ring's GAN of `preset` on 256 points, with `critic` in place of the ring's critic."
    return gan_learner(ring_mlp(2, 2), critic, ring_learner(n=256).dls, preset=preset, progress=False)


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


TRAINERS = {"alternate": GANTrainer, "dcgan": DCGANTrainer}


def gan_trainer(learn):
    "The learner's GANTrainer (or DCGANTrainer)."
    return next(cb for cb in learn.cbs if isinstance(cb, GANTrainer))


def test_each_preset_brings_its_optimizer_and_an_explicit_one_wins():
    standard, wgan = ring_learner(n=256), ring_learner("wgan", n=256)
    adam = standard.opts["critic"]
    assert isinstance(adam, torch.optim.Adam) and adam.defaults["betas"] == (0.5, 0.999) and standard.lr == 1e-3
    rms = wgan.opts["critic"]
    assert type(rms) is torch.optim.RMSprop and rms.defaults["momentum"] == 0 and wgan.lr == 5e-5  # Arjovsky et al.
    assert wgan.opt_func is not standard.opt_func
    sgd = ring_learner("wgan", n=256, opt_func=torch.optim.SGD, lr=0.1)
    assert all(type(opt) is torch.optim.SGD and opt.defaults["lr"] == 0.1 for opt in sgd.opts.values())


def at_first_modes(noise):
    "A generator without weights: sample k at mode k % 4 of the ring (E, NE, N, NW), exactly."
    angles = (torch.arange(len(noise)) % 4) * (math.pi / 4)
    return torch.stack([angles.cos(), angles.sin()], 1) * 2.0


def off_east(noise):
    "Every sample at (2.25, 0): 0.25 from the first mode."
    return torch.tensor([[2.25, 0.0]]).expand(len(noise), 2)


def test_mode_shares_is_the_share_of_samples_within_3_std_of_each_mode():
    assert mode_shares(at_first_modes).tolist() == [0.25] * 4 + [0.0] * 4
    assert mode_shares(at_first_modes, n_modes=4).tolist() == [0.25, 0.25, 0.0, 0.0]  # E, N, W, S
    assert mode_shares(off_east)[0] == 1.0 and mode_shares(off_east, std=0.05)[0] == 0.0  # 0.25 is within 0.3, not 0.15
    assert mode_shares(off_east, radius=2.25, std=0.01).tolist() == [1.0] + [0.0] * 7


def test_samples_are_the_generators_output_on_fixed_noise_without_gradient():
    set_seed(0)
    generator = ring_mlp(2, 2)
    first = samples(generator, 100)
    assert torch.equal(first, samples(generator, 100)) and not torch.equal(first, samples(generator, 100, seed=2))
    assert first.shape == (100, 2) and not first.requires_grad


@pytest.mark.parametrize("bad,error,message", [
    (dict(std=0), ValueError, "std must be a number > 0, got 0"),
    (dict(std=float("nan")), ValueError, "std must be a finite number"),
    (dict(std="0.1"), TypeError, "std must be a number, got '0.1'"),
    (dict(radius=-2.0), ValueError, "radius must be a number > 0, got -2.0"),
    (dict(n_modes=0), ValueError, "n_modes must be an int >= 1, got 0"),
    (dict(n_modes=8.0), TypeError, "n_modes must be an int, got 8.0"),
])
def test_mode_shares_refuses_a_ring_it_cannot_measure(bad, error, message):
    with pytest.raises(error, match=re.escape(message)):
        mode_shares(at_first_modes, **bad)


def test_ring_learner_is_gan_learner_on_the_seeded_ring_quiet_unless_asked():
    set_seed(3)
    real, _ = make_rings(256, std=0.1, seed=3)
    dls = DataLoaders.from_tensors(real, torch.zeros(len(real)), bs=64, valid_pct=0.0)
    by_hand = gan_learner(ring_mlp(2, 2), ring_mlp(2, 1), dls)
    learn = ring_learner(n=256, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(learn.model.parameters(), by_hand.model.parameters()))
    assert torch.equal(learn.dls.train.dataset.tensors[0], dls.train.dataset.tensors[0])
    assert learn.progress not in learn.cbs  # quiet: no progress table
    loud = ring_learner(n=256, progress=True)
    assert loud.progress in loud.cbs and isinstance(loud.progress, GANProgress)  # the GAN's table
    wgan = ring_learner("wgan", n=256, lr=1e-4)
    assert wgan.lr == 1e-4 and isinstance(wgan.opts["critic"], torch.optim.RMSprop)
    with pytest.raises(ValueError, match="n must be an int >= 1, got 0"):
        ring_learner(n=0)
    with pytest.raises(TypeError, match="n must be an int, got 2.5"):
        ring_learner(n=2.5)


def test_seeded_ring_run_covers_at_least_6_of_8_modes_in_seconds():
    learn = ring_learner(n=4096)
    start = time.perf_counter()
    learn.fit(30)
    seconds = time.perf_counter() - start
    covered = int((mode_shares(learn.model.generator) >= 0.02).sum())
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
    for bad in (0, -3):
        with pytest.raises(ValueError, match=rf"n_crit must be an int >= 1, got {bad!r}"):
            FixedGANSwitcher(n_crit=bad)
    for bad in (1.5, True, "2"):  # a wrong type is a TypeError, as every check_int says
        with pytest.raises(TypeError, match=rf"n_crit must be an int, got {bad!r}"):
            FixedGANSwitcher(n_crit=bad)
    with pytest.raises(ValueError, match="n_gen must be"):
        FixedGANSwitcher(n_gen=0)
    learn = ring_learner(switcher=FixedGANSwitcher(lambda n_g: 0, 1), n=256)
    with pytest.raises(CallbackError, match=r"n_crit\(0\) must be an int >= 1, got 0"):
        learn.fit(1)
    learn = ring_learner(switcher=FixedGANSwitcher(1, lambda n_c: 1.0), n=256)
    with pytest.raises(CallbackError, match=r"n_gen\(\d+\) must be an int, got 1.0 of type float"):
        learn.fit(1)
    learn = with_critic(nn.Linear(2, 3))
    with pytest.raises(ValueError, match=r"one score per item.*\(64, 3\)"):
        learn.fit(1)
    dls = DataLoaders.from_tensors(torch.randn(64, 2), torch.zeros(64), bs=32, valid_pct=0.0)
    plain = Learner(nn.Linear(2, 2), dls, cbs=[GANTrainer()])
    with pytest.raises(CallbackError, match="GANTrainer trains a looplab.gan.GANModule.*got Linear"):
        plain.fit(1)
    with pytest.raises(ValueError, match=r"preset must be one of \['standard', 'wgan'\], got 'dcgan'"):
        gan_learner(ring_mlp(2, 2), ring_mlp(2, 1), dls, preset="dcgan")
    with pytest.raises(TypeError, match="trainer_cls must be GANTrainer or a subclass of it"):
        gan_learner(ring_mlp(2, 2), ring_mlp(2, 1), dls, trainer_cls="dcgan")
    with pytest.raises(ValueError, match="DCGANTrainer trains the critic and then the generator.*nothing to switch"):
        gan_learner(ring_mlp(2, 2), ring_mlp(2, 1), dls, trainer_cls=DCGANTrainer, switcher=FixedGANSwitcher())
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


class Blitted(Callback):
    "After training batch `n_iter`, once the plot drew it: whether its blitted frame is the picture a full draw makes."
    order = 200

    def __init__(self, plot, n_iter):
        self.plot, self.n_iter, self.same = plot, n_iter, None

    def on_batch_end(self):
        if self.learn.training and self.learn.n_iter == self.n_iter:
            live = self.plot.live
            full_draws = live.n_full_draws
            blitted = live.png
            live.invalidate()
            live.render()
            self.same = full_draws < live.n_full_draws and pixels(blitted) == pixels(live.png)


def pixels(png: bytes) -> bytes:
    from PIL import Image
    return Image.open(io.BytesIO(png)).convert("RGBA").tobytes()


def test_gan_plot_widget_mode_keeps_the_loss_axes_redraws_the_samples_and_leaves_the_run_alone(monkeypatch):
    monkeypatch.setattr(Throttle, "due", lambda self: True)
    plot = GANPlot(ring_scatter(make_rings(256, std=0.1, seed=0)[0]), n_samples=64, mode="widget")
    check = Blitted(plot, 6)
    learn = ring_learner(cbs=[plot, check], n=512)
    learn.fit(1)
    alone = ring_learner(n=512)
    alone.fit(1)
    live = plot.live
    ax_loss, ax_samples = live.fig.axes
    # the two series and what show_samples drew last; the rest, the samples' axes and title too, is kept
    assert live.animated == [*ax_loss.lines, *ax_samples.collections]
    assert live.n_draws == 8 + 1 and live.n_full_draws <= 4  # blitted: the first, a few growing limits, the last
    assert check.same  # a blitted frame is the picture a full draw makes
    assert len(ax_samples.collections) == 2 and ax_samples.get_title() == f"samples after batch {learn.n_iter}"  # replaced
    assert live.png[:8] == PNG
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


@pytest.mark.parametrize("mode", ["alternate", "dcgan"])
def test_gan_run_checkpointed_mid_run_resumes_bit_for_bit_in_a_new_process(tmp_path, mode):
    stop_at = random.Random().randint(2, 30)  # 16 batches per epoch, 2 epochs
    whole = run_worker(WORKER, tmp_path / "whole.pt", env={"GAN_MODE": mode})
    run_worker(WORKER, tmp_path / "stopped.pt", "--stop-at", stop_at, "--ckpt", tmp_path / "ckpt.pt", env={"GAN_MODE": mode})
    resumed = run_worker(WORKER, tmp_path / "resumed.pt", "--resume", tmp_path / "ckpt.pt", env={"GAN_MODE": mode})
    where = f"{mode}, stopped after batch {stop_at}"
    assert all(torch.equal(a, b) for a, b in zip(whole["params"], resumed["params"])), where
    for name in ("generator", "critic"):
        assert all(torch.equal(a, b) for a, b in zip(whole["opts"][name], resumed["opts"][name])), where
    for key in ("gen_losses", "crit_losses", "losses", "columns"):
        assert torch.equal(whole[key], resumed[key]), (key, where)
    assert whole["switcher"] == resumed["switcher"] and whole["switcher"]["total_gen"] > 0
    assert whole["scaler"] == resumed["scaler"] and whole["scaler"]["scale"] != 2.0**10  # the scale moved
    assert whole["gen_mode"] and resumed["gen_mode"]
    if mode == "dcgan":
        assert len(whole["gen_losses"]) == len(whole["crit_losses"]) == 32  # both networks on every batch


# --- validation, columns, DCGAN mode, unlabelled data, clear errors (issue 21) -----------------------------------

@pytest.mark.parametrize("preset", ["standard", "wgan"])
@pytest.mark.parametrize("mode,gen_first", [("alternate", False), ("alternate", True), ("dcgan", False)])
def test_validation_never_crashes_and_changes_nothing_in_training(preset, mode, gen_first):
    set_seed(0)
    real, _ = make_rings(1000, std=0.1, seed=0)
    dls = DataLoaders.from_tensors(real, torch.zeros(len(real)), bs=64)  # valid_pct=0.2: crashed after epoch 1
    runs = []
    for valid in (list(dls.valid), None):  # a list: iterating a torch DataLoader draws a global random number
        set_seed(1)
        learn = gan_learner(ring_mlp(2, 2), ring_mlp(2, 1), DataLoaders(dls.train, valid), preset=preset,
                            trainer_cls=TRAINERS[mode])
        gan_trainer(learn).gen_first = gen_first
        learn.remove_cbs(learn.progress)
        learn.fit(2)
        runs.append(learn)
    with_valid, without = runs
    assert all(math.isfinite(row["valid_loss"]) for row in with_valid.recorder.values)
    assert all(math.isnan(row["valid_loss"]) for row in without.recorder.values)
    assert all(torch.equal(a, b) for a, b in zip(with_valid.model.parameters(), without.model.parameters()))


def test_columns_are_printed_and_each_is_the_epochs_mean():
    import io
    learn = ring_learner(n=1024, cbs=[GANColumns()], progress=True)  # the GAN's progress table
    learn.progress.file = io.StringIO()
    learn.fit(1)
    header, row_line = learn.progress.file.getvalue().splitlines()[:2]
    assert header.split() == ["epoch", "gen_loss", "crit_loss", "D(x)", "D(G(z))", "time"]  # no train_loss, no NaN valid_loss
    row = learn.recorder.values[-1]
    trainer = learn.cbs[[type(c) for c in learn.cbs].index(GANTrainer)]
    for name, rows in (("gen_loss", trainer.gen_losses), ("crit_loss", trainer.crit_losses)):
        assert row[name] == pytest.approx(sum(v for _, v in rows) / len(rows), rel=1e-6)
    assert f"{row['D(x)']:.4f}" in row_line


@pytest.mark.parametrize("form", ["tensor", "1-tuple", "list", "pair"])
def test_unlabelled_batches_need_no_dummy_labels(form):
    real, _ = make_rings(256, std=0.1, seed=0)
    make = {"tensor": lambda x: x, "1-tuple": lambda x: (x,), "list": lambda x: [x],
            "pair": lambda x: (x, torch.zeros(len(x)))}[form]
    batches = [make(real[i:i + 64]) for i in range(0, 256, 64)]
    learn = gan_learner(ring_mlp(2, 2), ring_mlp(2, 1), DataLoaders(batches, batches[:1]), trainer_cls=DCGANTrainer)
    learn.remove_cbs(learn.progress)
    learn.fit(1)
    assert math.isfinite(learn.recorder.values[-1]["valid_loss"])


def test_dcgan_mode_under_amp_bfloat16_runs():
    set_seed(0)
    real, _ = make_rings(512, std=0.1, seed=0)
    dls = DataLoaders.from_tensors(real, torch.zeros(len(real)), bs=64, valid_pct=0.0)
    learn = gan_learner(ring_mlp(2, 2), ring_mlp(2, 1), dls, trainer_cls=DCGANTrainer,
                        engine=AMPEngine(torch.bfloat16, device="cpu"))
    learn.remove_cbs(learn.progress)
    learn.fit(2)
    trainer = gan_trainer(learn)
    assert len(trainer.gen_losses) == len(trainer.crit_losses) == 16
    assert all(math.isfinite(v) for _, v in trainer.gen_losses + trainer.crit_losses)


def conv_generator(nz):
    return nn.Sequential(nn.ConvTranspose2d(nz, 8, 4, 1, 0), nn.ReLU(), nn.ConvTranspose2d(8, 1, 4, 2, 1), nn.Tanh())


@pytest.mark.parametrize("generator,noise_size,wanted", [
    (ring_mlp(8, 2), 2, "noise_size=8"),
    (ring_mlp(8, 2), (8, 1, 1), "noise_size=8"),
    (conv_generator(16), 16, "noise_size=(16, 1, 1)"),
    (conv_generator(16), (8, 1, 1), "noise_size=(16, 1, 1)"),
])
def test_a_noise_size_that_does_not_fit_the_generator_is_named(generator, noise_size, wanted):
    images = torch.randn(128, 1, 8, 8)
    critic = nn.Sequential(nn.Flatten(), nn.Linear(64, 1)) if isinstance(generator[0], nn.ConvTranspose2d) else ring_mlp(2, 1)
    data = images if isinstance(generator[0], nn.ConvTranspose2d) else torch.randn(128, 2)
    learn = gan_learner(generator, critic, DataLoaders([(data[:64],), (data[64:],)]), noise_size=noise_size)
    learn.remove_cbs(learn.progress)
    shown = noise_size if isinstance(noise_size, int) else noise_size
    with pytest.raises(CallbackError, match=rf"noise_size={re.escape(str(shown))} does not fit the generator") as info:
        learn.fit(1)
    assert wanted in str(info.value)


@pytest.mark.parametrize("critic,shape", [
    (nn.Sequential(nn.Conv2d(1, 4, 3, 1, 1), nn.Conv2d(4, 1, 3, 2, 1)), "(64, 1, 4, 4)"),  # conv, stops at 4x4
    (nn.Sequential(nn.Flatten(), nn.Linear(64, 16)), "(64, 16)"),
])
def test_a_critic_with_more_than_one_score_per_item_names_the_shape_and_both_fixes(critic, shape):
    images = torch.randn(128, 1, 8, 8)
    generator = nn.Sequential(nn.Linear(4, 64), nn.Unflatten(1, (1, 8, 8)))
    learn = gan_learner(generator, critic, DataLoaders([images[:64], images[64:]]), noise_size=4)
    learn.remove_cbs(learn.progress)
    with pytest.raises(ValueError, match=re.escape(shape)) as info:
        learn.fit(1)
    assert "conv to 1 channel" in str(info.value) and "nn.Flatten()" in str(info.value)


def test_a_sigmoid_ended_critic_is_refused_before_the_first_batch_with_the_fix():
    learn = with_critic(nn.Sequential(ring_mlp(2, 1), nn.Sigmoid()))
    with pytest.raises(CallbackError, match="ends in nn.Sigmoid.*bce_crit_loss wants logits.*remove the critic's final"):
        learn.fit(1)
    wgan = with_critic(nn.Sequential(ring_mlp(2, 1), nn.Sigmoid()), "wgan")
    wgan.fit(1)  # WGAN's losses take any score: a sigmoid there is odd, not wrong


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_gan_plot_in_a_script_writes_a_progress_line_and_a_summary(monkeypatch):
    monkeypatch.setattr(Throttle, "due", lambda self: True)
    term = Terminal()
    plot = GANPlot(ring_scatter(make_rings(256, std=0.1, seed=0)[0]), mode="text", file=term)
    ring_learner(cbs=[plot], n=512).fit(2)
    lines = term.getvalue().split("\n")
    progress = [r.rstrip() for line in lines for r in line.split("\r")[:-1] if r.strip()]
    finished = [line.split("\r")[-1] for line in lines if line.split("\r")[-1].strip()]
    pattern = (r"epoch [12]/2 · batch \d+/8( · gen -?\d+\.\d{3})? · crit -?\d+\.\d{3} · "
               r"\d:\d\d elapsed( · \d:\d\d left)?")
    assert progress and [line for line in progress if not re.fullmatch(pattern, line)] == []
    assert all(len(line) <= 79 for line in progress)
    assert len(finished) == 1 and re.fullmatch(r"GANPlot: 16 training batches in \d:\d\d · gen -?\d+\.\d{3} · "
                                               r"crit -?\d+\.\d{3}", finished[0]), finished
