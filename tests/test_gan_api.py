"GAN learner API (issue 31): loss functions as fastai takes them, honest columns, the DCGAN recipe, quiet validation."
import io
import math
import random

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from looplab.data import DataLoaders, make_rings, set_seed
from looplab.gan import (GANProgress, GANTrainer, bce_crit_loss, gan_learner, nonsaturating_gen_loss, wgan_crit_loss,
                         wgan_gen_loss)
from looplab.gan_images import GAN_COLUMNS, SCORE_COLUMNS, DCGANTrainer, GANColumns


def mlp(n_in, n_out, hidden=32):
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))


def ring_dls(n=512, valid=None):
    real, _ = make_rings(n, std=0.1, seed=0)
    train = DataLoaders.from_tensors(real, torch.zeros(len(real)), bs=64, valid_pct=0.0).train
    return DataLoaders(train, valid)


def shuffling_loader():
    "A user's validation loader with no generator of its own: every pass draws from the global generator."
    return DataLoader(TensorDataset(make_rings(160, std=0.1, seed=1)[0]), batch_size=32, shuffle=True)


def from_tensors_valid():
    real, _ = make_rings(320, std=0.1, seed=2)
    return DataLoaders.from_tensors(real, torch.zeros(len(real)), bs=64, valid_pct=0.5).valid


def train(valid, preset, trainer_cls):
    set_seed(0)
    learn = gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(valid=valid), preset=preset, trainer_cls=trainer_cls,
                        progress=False)
    learn.fit(2)
    return learn


@pytest.mark.parametrize("trainer_cls", [GANTrainer, DCGANTrainer])
@pytest.mark.parametrize("preset", ["standard", "wgan"])
@pytest.mark.parametrize("make_valid", [shuffling_loader, from_tensors_valid])
def test_a_validation_set_leaves_gan_training_bit_identical(trainer_cls, preset, make_valid):
    without = train(None, preset, trainer_cls)
    with_valid = train(make_valid(), preset, trainer_cls)
    assert all(math.isfinite(row["valid_loss"]) for row in with_valid.recorder.values)
    assert all(torch.equal(a, b) for a, b in zip(with_valid.model.parameters(), without.model.parameters()))
    for name in ("generator", "critic"):
        assert with_valid.opts[name].state_dict()["state"].keys() == without.opts[name].state_dict()["state"].keys()


def test_validate_puts_back_every_global_generator():
    learn = train(None, "standard", GANTrainer)
    set_seed(5)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    learn.validate(shuffling_loader())
    assert random.getstate() == before[0] and np.array_equal(np.random.get_state()[1], before[1])
    assert torch.equal(torch.get_rng_state(), before[2])


def test_explicit_loss_functions_win_over_the_preset_and_keep_its_other_settings():
    def my_gen_loss(fake_scores):
        return nonsaturating_gen_loss(fake_scores)

    learn = gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(), gen_loss_func=my_gen_loss, crit_loss_func=bce_crit_loss)
    assert learn.loss_func.gen_loss_func is my_gen_loss and learn.loss_func.crit_loss_func is bce_crit_loss
    wgan = gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(), preset="wgan", gen_loss_func=my_gen_loss)
    assert wgan.loss_func.gen_loss_func is my_gen_loss and wgan.loss_func.crit_loss_func is wgan_crit_loss
    assert type(wgan.opts["critic"]) is torch.optim.RMSprop and wgan.lr == 5e-5  # the rest of the preset's row
    set_seed(0)
    own = gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(), gen_loss_func=wgan_gen_loss, crit_loss_func=wgan_crit_loss,
                      progress=False)
    own.fit(1)
    assert all(math.isfinite(v) for _, v in own.cbs[[type(c) for c in own.cbs].index(GANTrainer)].gen_losses)
    with pytest.raises(TypeError, match="crit_loss_func must be a function.*got 'bce'"):
        gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(), crit_loss_func="bce")


def test_the_dcgan_recipe_is_named_wherever_a_wrong_value_is_refused():
    with pytest.raises(ValueError, match=r"preset must be one of.*'dcgan'.*trainer_cls=DCGANTrainer"):
        gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(), preset="dcgan")
    with pytest.raises(TypeError, match=r"trainer_cls must be.*'dcgan'.*from looplab.gan_images import DCGANTrainer"):
        gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(), trainer_cls="dcgan")
    learn = gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(), trainer_cls=DCGANTrainer, progress=False)
    learn.fit(1)
    trainer = learn.cbs[[type(c) for c in learn.cbs].index(DCGANTrainer)]
    assert len(trainer.gen_losses) == len(trainer.crit_losses) == 8


def table(learn, n_epochs=1):
    learn.progress.file = io.StringIO()
    learn.fit(n_epochs)
    return learn.progress.file.getvalue().splitlines()


def test_the_table_has_no_duplicated_train_loss_and_no_nan_valid_loss():
    set_seed(0)
    learn = gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(), cbs=[GANColumns()])
    assert isinstance(learn.progress, GANProgress)
    lines = table(learn)
    assert lines[0].split() == ["epoch", *GAN_COLUMNS, "time"]
    assert "nan" not in lines[1]
    set_seed(0)
    valid = gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(valid=shuffling_loader()), trainer_cls=DCGANTrainer,
                        cbs=[GANColumns()])
    assert table(valid)[0].split() == ["epoch", "valid_loss", *GAN_COLUMNS, "time"]
    plain = gan_learner(mlp(2, 2), mlp(2, 1), ring_dls())  # no per-network columns: train_loss is all there is
    assert table(plain)[0].split() == ["epoch", "train_loss", "time"]
    assert gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(), progress=False).progress not in gan_learner(
        mlp(2, 2), mlp(2, 1), ring_dls(), progress=False).cbs


class Scores(GANColumns):
    "GANColumns that also keeps every critic batch's raw scores, to check the columns by hand."
    def __init__(self):
        super().__init__()
        self.batches = []

    def on_batch_end(self):
        super().on_batch_end()
        feeder = self.learn.cbs[[type(c) for c in self.learn.cbs].index(GANTrainer)]
        if self.learn.training and feeder.crit_loss is not None:
            loss = self.learn.loss_func
            self.batches.append((loss.real_score, loss.fake_score, loss.real_prob, loss.fake_prob))


def test_standard_columns_are_probabilities_and_wgan_columns_are_named_as_scores():
    set_seed(0)
    cols = Scores()
    learn = gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(), cbs=[cols], progress=False)
    learn.fit(1)
    row = learn.recorder.values[-1]
    assert 0 < row["D(G(z))"] < 1 and 0 < row["D(x)"] < 1
    assert row["D(x)"] == pytest.approx(float(torch.stack([b[2] for b in cols.batches]).mean()), rel=1e-6)
    assert all(0 < float(p) < 1 for b in cols.batches for p in b[2:])
    set_seed(0)
    wcols = Scores()
    wgan = gan_learner(mlp(2, 2), mlp(2, 1), ring_dls(), preset="wgan", cbs=[wcols], progress=False)
    wgan.fit(1)
    row = wgan.recorder.values[-1]
    assert not any(name in row for name in ("D(x)", "D(G(z))"))
    assert row["critic(x)"] == pytest.approx(float(torch.stack([b[0] for b in wcols.batches]).mean()), rel=1e-6)
    assert all(b[2] is None for b in wcols.batches) and SCORE_COLUMNS[2] == "critic(x)"


def test_samples_reach_the_generator_on_its_device_and_come_back_on_the_cpu():
    from looplab.gan import mode_shares, samples

    class Elsewhere(nn.Module):
        "A generator whose weights live on another device (`meta` stands in for a GPU here)."
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.empty(2, device="meta"))
            self.seen = None

        def forward(self, z):
            self.seen = z.device
            return torch.tensor([2.0, 0.0]).expand(len(z), 2)  # the ring's first mode, whatever the noise

    away = Elsewhere()
    out = samples(away, 10)
    assert away.seen == torch.device("meta") and out.device == torch.device("cpu") and out.shape == (10, 2)
    assert mode_shares(away, radius=2.0).tolist() == [1.0] + [0.0] * 7  # every sample on mode 0, counted on the CPU
    torch.manual_seed(0)
    plain = mlp(2, 2)
    z = torch.randn(10, 2, generator=torch.Generator().manual_seed(1))
    assert torch.equal(samples(plain, 10), plain(z).detach())  # the same noise as drawn by hand
