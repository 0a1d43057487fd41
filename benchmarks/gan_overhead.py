"""A GAN's batch in looplab against the same batch written by hand: one critic step and one generator step.

Runs examples/dcgan.py (gan_learner with DCGANTrainer and GANColumns: the Learner, its callbacks and engine) and
examples/dcgan_plain.py (pytorch/examples' DCGAN loop written out, with the same D(x) and D(G(z)) read each batch)
in this process, with one thread and the same seed, in interleaved rounds after an untimed warm-up of each (plain
then looplab, then looplab then plain, ...), so that the machine's noise hits both alike. Checks that both end with
bit-identical weights, then prints the time per batch of each (median over the rounds), the median ratio
looplab/plain and the ratio of the two fastest runs (noise only ever slows a run down).

    python benchmarks/gan_overhead.py [--rounds 7] [--n-images 1024]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n-images", type=int, default=1024, help="digits per epoch (64 per batch)")
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


if __name__ == "__main__":
    main()
