"""pytorch/examples' dcgan/main.py in plain torch, on the digits upscaled to 16x16 (no download), small enough for a CPU.

    python examples/dcgan_plain.py --epochs 5

Its twin examples/dcgan.py trains the same networks with looplab's gan_learner(..., trainer_cls=DCGANTrainer);
tests/test_dcgan_examples.py checks that both end with the same weights. The changes from the original, all for
small data: 16x16 images (two up-sampling convs, not four), nz = ngf = ndf = 16, one channel; the critic ends
without a sigmoid and the binary cross-entropy is computed from its logits, as softplus (-log sigmoid(x) is
softplus(-x)). nn.BCEWithLogitsLoss gives the same values by another formula, different in the last bits: enough
for Adam to make the two runs drift apart by 3e-5 in 8 steps, so this port writes the formula out, as looplab's
bce_crit_loss and nonsaturating_gen_loss do, and the twins stay bit-identical."""
import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from looplab.data import load_digits


def digits_16(n_images: int | None = None) -> torch.Tensor:
    "The 8x8 digits upscaled to 1x16x16, in [-1, 1] like the original's normalised images."
    x, _ = load_digits(flatten=False)
    x = F.interpolate(x.reshape(-1, 1, 8, 8), size=16, mode="bilinear", align_corners=False)
    return (x * 2 - 1)[:n_images]


def digits_loader(bs: int, seed: int, n_images: int | None = None) -> DataLoader:
    "Batches of `digits_16` images alone (no labels: a GAN needs none), shuffled by a generator seeded with `seed`."
    return DataLoader(TensorDataset(digits_16(n_images)), batch_size=bs, shuffle=True,
                      generator=torch.Generator().manual_seed(seed))


def weights_init(m: nn.Module) -> None:
    "The original's initialisation: conv weights N(0, 0.02), batch-norm weights N(1, 0.02) and biases 0."
    if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif isinstance(m, nn.BatchNorm2d):
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


def make_nets(nz: int = 16, ngf: int = 16, ndf: int = 16) -> tuple[nn.Module, nn.Module]:
    "The generator (nz x 1 x 1 -> 1 x 16 x 16) and the critic (1 x 16 x 16 -> one logit per image), initialised."
    generator = nn.Sequential(
        nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),  # 4x4
        nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),  # 8x8
        nn.ConvTranspose2d(ngf, 1, 4, 2, 1, bias=False), nn.Tanh())  # 16x16
    critic = nn.Sequential(
        nn.Conv2d(1, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),  # 8x8
        nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),  # 4x4
        nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False))  # 1x1: one logit per image, shape (bs, 1, 1, 1)
    generator.apply(weights_init)
    critic.apply(weights_init)
    return generator, critic


def train(epochs: int = 5, bs: int = 64, lr: float = 2e-4, nz: int = 16, seed: int = 1, n_images: int | None = None,
          verbose: bool = True) -> tuple[nn.Module, nn.Module]:
    "Train a DCGAN on the digits; return the generator and the critic."
    torch.manual_seed(seed)
    netG, netD = make_nets(nz)
    loader = digits_loader(bs, seed, n_images)
    optimizerD = torch.optim.Adam(netD.parameters(), lr=lr, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=lr, betas=(0.5, 0.999))
    for epoch in range(epochs):
        start = time.perf_counter()
        for i, (real,) in enumerate(loader):
            # (1) the critic: maximise log D(x) + log(1 - D(G(z)))
            netD.zero_grad()
            output = netD(real).view(-1)
            errD_real = F.softplus(-output).mean()  # BCE of logits against the label 1 (real)
            D_x = output.sigmoid().mean().item()  # the probability D gives a real image, as the original prints it
            noise = torch.randn(len(real), nz, 1, 1)
            fake = netG(noise)
            output = netD(fake.detach()).view(-1)
            errD_fake = F.softplus(output).mean()  # against 0 (fake)
            D_G_z1 = output.sigmoid().mean().item()
            errD = errD_real + errD_fake
            errD.backward()
            optimizerD.step()
            # (2) the generator: maximise log D(G(z)), on the same fakes
            netG.zero_grad()
            output = netD(fake).view(-1)
            errG = F.softplus(-output).mean()  # fakes labelled real: the non-saturating generator loss
            errG.backward()
            D_G_z2 = output.sigmoid().mean().item()
            optimizerG.step()
            if verbose and i % 10 == 0:
                print(f"[{epoch}/{epochs}][{i}/{len(loader)}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f} "
                      f"D(x): {D_x:.4f} D(G(z)): {D_G_z1:.4f} / {D_G_z2:.4f}")
        if verbose:
            print(f"epoch {epoch + 1}: {time.perf_counter() - start:.1f}s")
    return netG, netD


def parse_args(description: str, argv=None) -> argparse.Namespace:
    "The command line both twins read: --epochs, --bs, --lr, --seed."
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--bs", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args(__doc__)
    train(args.epochs, args.bs, args.lr, seed=args.seed)
