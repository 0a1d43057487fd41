"""A GAN's batch in looplab against the same batch written by hand: one critic step and one generator step.

Two workloads. The DCGAN, where the convolutions take most of a batch's time: runs examples/dcgan.py (gan_learner with DCGANTrainer and GANColumns: the Learner, its callbacks and engine) and
examples/dcgan_plain.py (pytorch/examples' DCGAN loop written out, with the same D(x) and D(G(z)) read each batch)
in this process, with one thread and the same seed, in interleaved rounds after an untimed warm-up of each (plain
then looplab, then looplab then plain, ...), so that the machine's noise hits both alike. Checks that both end with
bit-identical weights, then prints the time per batch of each (median over the rounds), the median ratio
looplab/plain and the ratio of the two fastest runs (noise only ever slows a run down).

And the host-bound GAN of notebook 10: the ring of 8 Gaussians, two 2-128-128 MLPs, the standard preset (one critic
batch, then one generator batch, Adam with beta1 0.5), where a step costs well under a millisecond and the loop's
own work shows: `gan_learner` against `plain_ring_gan` below, the same steps by hand, bit-identical weights checked
first, one step per batch timed as above.

    python benchmarks/gan_overhead.py [--rounds 7] [--n-images 1024] [--ring-batches 2048]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from looplab.data import DataLoaders, make_rings
from looplab.gan import gan_learner, ring_mlp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import dcgan as looplab_port  # noqa: E402  (the examples are scripts, not a package)
import dcgan_plain as plain  # noqa: E402


def looplab_weights(n_images: int) -> list[torch.Tensor]:
    learn = looplab_port.train(epochs=1, n_images=n_images, verbose=False)
    return [*learn.model.generator.parameters(), *learn.model.critic.parameters()]


def plain_weights(n_images: int) -> list[torch.Tensor]:
    generator, critic = plain.train(epochs=1, n_images=n_images, verbose=False)
    return [*generator.parameters(), *critic.parameters()]


def timed(run, n_images: int) -> tuple[list[torch.Tensor], float]:
    start = time.perf_counter()
    weights = run(n_images)
    return weights, time.perf_counter() - start


def ring_batches(n_batches: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    "`n_batches` batches of 64 points of the ring of 8 Gaussians (std 0.1), with labels a GAN ignores."
    real, modes = make_rings(64 * n_batches, std=0.1, seed=0)
    return [(real[i:i + 64], modes[i:i + 64]) for i in range(0, len(real), 64)]


def ring_networks() -> tuple[nn.Module, nn.Module]:
    "Notebook 10's generator (2 -> 2) and critic (2 -> 1): MLPs with two hidden layers of 128, from seed 0."
    torch.manual_seed(0)
    return ring_mlp(2, 2), ring_mlp(2, 1)


def looplab_ring_gan(batches) -> tuple[list[torch.Tensor], float]:
    "One epoch of gan_learner (standard preset: critic and generator batches in turn); the weights, and seconds."
    generator, critic = ring_networks()
    learn = gan_learner(generator, critic, DataLoaders(batches, None), preset="standard", noise_size=2)
    learn.remove_cbs(learn.progress)
    start = time.perf_counter()
    learn.fit(1)
    took = time.perf_counter() - start
    return [*generator.parameters(), *critic.parameters()], took


def plain_ring_gan(batches) -> tuple[list[torch.Tensor], float]:
    "The same epoch by hand: a critic batch (real against fresh fakes), then a generator batch, each with its loss kept."
    generator, critic = ring_networks()
    opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.999))
    opt_c = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.999))
    crit_losses, gen_losses, real_scores, fake_scores = [], [], [], []
    start = time.perf_counter()
    for i, (real, _) in enumerate(batches):
        noise = torch.randn(len(real), 2)
        train_critic = i % 2 == 0
        generator.requires_grad_(not train_critic)
        critic.requires_grad_(train_critic)
        if train_critic:
            real_score = critic(real).reshape(-1)
            with torch.no_grad():
                fake = generator(noise)
            fake_score = critic(fake).reshape(-1)
            loss = F.softplus(-real_score).mean() + F.softplus(fake_score).mean()
            real_scores.append(real_score.detach().mean())
            fake_scores.append(fake_score.detach().mean())
            opt = opt_c
        else:
            loss = F.softplus(-critic(generator(noise)).reshape(-1)).mean()
            opt = opt_g
        loss.backward()
        opt.step()
        opt.zero_grad()
        (crit_losses if train_critic else gen_losses).append(loss.item())
    took = time.perf_counter() - start
    return [*generator.parameters(), *critic.parameters()], took


def ring_row(n_batches: int, rounds: int) -> None:
    "The host-bound GAN: looplab against the plain loop, bit-identical weights first, then interleaved rounds."
    batches = ring_batches(n_batches)
    mine, _ = looplab_ring_gan(batches)
    theirs, _ = plain_ring_gan(batches)
    if not all(torch.equal(a, b) for a, b in zip(mine, theirs)):
        raise SystemExit("gan_learner and plain_ring_gan no longer train the same weights: the timing would compare "
                         "two different computations")
    times = {"plain": [], "looplab": []}
    order = [("plain", plain_ring_gan), ("looplab", looplab_ring_gan)]
    for round_ in range(rounds):
        for name, run in order if round_ % 2 == 0 else order[::-1]:
            times[name].append(run(batches)[1] / len(batches) * 1e6)
    ratios = [a / b for a, b in zip(times["looplab"], times["plain"])]
    print(f"ring GAN, one step per batch ({len(batches)} batches of 64 points), bit-identical weights: yes")
    print(f"ring GAN, critic and generator in turn  plain {statistics.median(times['plain']):7.1f} µs/batch"
          f"  looplab {statistics.median(times['looplab']):7.1f} µs/batch  median ratio {statistics.median(ratios):.3f}"
          f" (min {min(ratios):.3f}, max {max(ratios):.3f}); fastest/fastest "
          f"{min(times['looplab']) / min(times['plain']):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n-images", type=int, default=1024, help="digits per epoch (64 per batch)")
    parser.add_argument("--ring-batches", type=int, default=2048, help="batches per epoch of the ring GAN")
    args = parser.parse_args()
    torch.set_num_threads(1)
    n_batches = -(-args.n_images // 64)
    mine, _ = timed(looplab_weights, args.n_images)  # warm-up, and the equality check
    theirs, _ = timed(plain_weights, args.n_images)
    if not all(torch.equal(a, b) for a, b in zip(mine, theirs)):
        raise SystemExit("looplab's DCGAN and the plain loop no longer train the same weights: the timing compares "
                         "two different computations (see tests/test_dcgan_examples.py)")
    times = {"plain": [], "looplab": []}
    order = [("plain", plain_weights), ("looplab", looplab_weights)]
    for round_ in range(args.rounds):
        for name, run in order if round_ % 2 == 0 else order[::-1]:
            times[name].append(timed(run, args.n_images)[1] / n_batches * 1e3)
    ratios = [a / b for a, b in zip(times["looplab"], times["plain"])]
    print(f"torch {torch.__version__}, 1 thread, {args.rounds} interleaved rounds of one epoch, {n_batches} batches "
          f"of 64 digits (16x16), bit-identical weights: yes")
    print(f"DCGAN, one critic + one generator step  plain {statistics.median(times['plain']):7.2f} ms/batch"
          f"  looplab {statistics.median(times['looplab']):7.2f} ms/batch  median ratio {statistics.median(ratios):.3f}"
          f" (min {min(ratios):.3f}, max {max(ratios):.3f}); fastest/fastest "
          f"{min(times['looplab']) / min(times['plain']):.3f}")
    ring_row(args.ring_batches, args.rounds)


if __name__ == "__main__":
    main()
