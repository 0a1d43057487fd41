"""pytorch/examples' word language model, ported to looplab, against the same experiment in plain torch.

Runs examples/word_language_model.py (the Learner, CarryState, Perplexity) and examples/word_language_model_plain.py
(the original's loop written out) in this process, with the same seed and one thread, in interleaved rounds
(after an untimed warm-up run of each; plain then looplab, then looplab then plain, ...) so that the machine's noise hits both alike. Prints each one's test
perplexity, whether their final weights are bit-identical, and the CPU time ratio looplab/plain (the median over
the rounds, and the ratio of the two fastest runs: noise only ever slows a run down).

    python benchmarks/language_model.py [--rounds 5] [--quick]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import word_language_model as looplab_port  # noqa: E402  (the examples are scripts, not a package)
import word_language_model_plain as plain  # noqa: E402


def timed(main, argv) -> tuple[dict, float]:
    "`main(argv)`'s result and the CPU time it took."
    start = time.process_time()
    result = main(argv, verbose=False)
    return result, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 epochs on 600 sentences")
    args = parser.parse_args()
    torch.set_num_threads(1)
    argv = ["--quick"] if args.quick else []
    times = {"plain": [], "looplab": []}
    results = {}
    runs = [("plain", plain.main), ("looplab", looplab_port.main)]
    for name, run in runs:  # a warm-up run each, untimed: the first run of a process pays one-time costs
        timed(run, argv)
    for r in range(args.rounds):
        for name, run in runs if r % 2 == 0 else runs[::-1]:  # each goes first in every other round
            results[name], seconds = timed(run, argv)
            times[name].append(seconds)
    same = all(torch.equal(p, q) for p, q in zip(results["plain"]["params"], results["looplab"]["params"]))
    ratios = [a / b for a, b in zip(times["looplab"], times["plain"])]
    print(f"test perplexity: plain torch {results['plain']['test_ppl']:.6f}, looplab {results['looplab']['test_ppl']:.6f} "
          f"(relative difference {abs(results['looplab']['test_ppl'] / results['plain']['test_ppl'] - 1):.1e}); "
          f"final weights bit-identical: {same}")
    print(f"CPU seconds per run: plain {statistics.median(times['plain']):.2f}, "
          f"looplab {statistics.median(times['looplab']):.2f} (medians of {args.rounds} interleaved rounds)")
    print(f"looplab/plain CPU time: median ratio {statistics.median(ratios):.3f}, "
          f"fastest/fastest {min(times['looplab']) / min(times['plain']):.3f}")


if __name__ == "__main__":
    main()
