"""pytorch/examples' dcgan/main.py ported to looplab, on the digits upscaled to 16x16 (no download), small enough for a CPU.

    python examples/dcgan.py --epochs 5

The same networks, data, seed and optimizers as examples/dcgan_plain.py (the plain torch twin, whose docstring lists
what changed from the original); the loop is looplab's, in DCGAN mode (DCGANTrainer): on every batch one critic step
on real images against the generator's fakes, then one generator step on those same fakes. The progress table shows
each epoch's gen_loss, crit_loss, D(x) and D(G(z)) (mean probabilities, the sigmoid of the critic's logits), from
GANColumns."""
import torch

from looplab.data import DataLoaders
from looplab.gan import gan_learner
from looplab.gan_images import DCGANTrainer, GANColumns

from dcgan_plain import digits_loader, make_nets, parse_args


def train(epochs: int = 5, bs: int = 64, lr: float = 2e-4, nz: int = 16, seed: int = 1, n_images: int | None = None,
          verbose: bool = True):
    "Train a DCGAN on the digits with looplab; return the learner (`learn.model.generator`, `learn.model.critic`)."
    torch.manual_seed(seed)
    generator, critic = make_nets(nz)
    loader = digits_loader(bs, seed, n_images)  # batches of images alone: no labels needed
    learn = gan_learner(generator, critic, DataLoaders(loader), noise_size=(nz, 1, 1), lr=lr, trainer_cls=DCGANTrainer,
                        cbs=[GANColumns()])
    if not verbose:
        learn.remove_cbs(learn.progress)
    learn.fit(epochs)
    return learn


if __name__ == "__main__":
    args = parse_args(__doc__)
    train(args.epochs, args.bs, args.lr, seed=args.seed)
