"""What watching the activations costs: time per batch of `Learner.fit` with `ActivationStats` (looplab.activations: a
forward hook on each layer with weights, each computing the layer's mean, std, share near zero and a 40-bin
histogram on the device) and with the live `ActivationPlot` drawing as in a notebook (mode="widget"), against the
same fit without, on the conv net of looplab.conv (4 hooked layers) and on the tiny MLP of
benchmarks/loop_overhead.py (2 hooked layers).

The hooks add no loop event; their cost is a few small tensor operations per hooked layer per batch, so it weighs most on tiny models. Runs are interleaved in one
process with one thread (benchmarks/profiler_overhead.py's `measure`): median ratio, and fastest/fastest.
Run: python benchmarks/activation_overhead.py [--rounds N]
"""
import argparse

import torch

from looplab.activations import ActivationPlot, ActivationStats

from profiler_overhead import measure, signals_conv, tiny_mlp  # a sibling script: benchmarks/ is on sys.path when run


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, {args.rounds} interleaved rounds")
    for name, workload, n_batches in (("conv net on signals, bs 64", signals_conv, 200),
                                      ("tiny MLP 64-64-10, bs 64", tiny_mlp, 2000)):
        measure(f"{name}, ActivationStats", workload, n_batches, args.rounds, lambda: [ActivationStats()])
        # The live picture: off-screen PNGs at most every 250 ms and 10 % of the time, plus the first and the final
        # picture: a fixed part per fit, which weighs most on short fits like these (~0.3-0.6 s).
        measure(f"{name}, ActivationPlot (widget)", workload, n_batches, args.rounds,
                lambda: [ActivationPlot(mode="widget")])
    measure("conv net, ActivationPlot (widget), 3x", signals_conv, 600, args.rounds,
            lambda: [ActivationPlot(mode="widget")])


if __name__ == "__main__":
    main()
