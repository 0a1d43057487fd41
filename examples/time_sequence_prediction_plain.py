"""pytorch/examples' time_sequence_prediction in plain torch: two stacked LSTM cells learn sine waves with L-BFGS.

    python examples/time_sequence_prediction_plain.py [--steps 15] [--quick] [--plot predictions.png]

The original's experiment, written out: 100 sine waves of period 2*pi*20, each shifted by a random offset, in
float64; the first three waves are the test set. Every optimizer step is `optimizer.step(closure)`: L-BFGS calls
the closure (zero the gradients, forward over the whole sequence, loss, backward) up to 20 times per step. After
each step the model predicts the test waves, then 1000 steps beyond them on its own outputs. Changed from the
original: the waves come from a seeded torch generator (not numpy and a data file), and `--quick` makes them
short for a test. Its twin examples/time_sequence_prediction.py trains the same with looplab's Learner
(`opt_func=torch.optim.LBFGS`); tests/test_closure.py checks that both end with the same weights."""
import argparse

import torch
from torch import nn


def sine_waves(n: int = 100, length: int = 1000, period: float = 20.0, seed: int = 2) -> torch.Tensor:
    "`n` sine waves of `length` samples, each starting at a random offset within 4 periods: (n, length), float64."
    g = torch.Generator().manual_seed(seed)
    offsets = torch.randint(int(-4 * period), int(4 * period), (n, 1), generator=g)
    return torch.sin((torch.arange(length) + offsets).double() / period)


def split(waves: torch.Tensor) -> tuple[torch.Tensor, ...]:
    "The original's split: waves 3.. to train on, the first 3 to test; the target is the input one step later."
    return waves[3:, :-1], waves[3:, 1:], waves[:3, :-1], waves[:3, 1:]


class Sequence(nn.Module):
    "Two LSTM cells and a linear read-out, stepped along the sequence; `future` steps more fed on their own output."
    def __init__(self, hidden: int = 51):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor, future: int = 0) -> torch.Tensor:
        zeros = torch.zeros(x.size(0), self.hidden, dtype=x.dtype)
        h1, c1, h2, c2 = zeros, zeros, zeros, zeros
        outputs = []
        for x_t in x.split(1, dim=1):
            h1, c1 = self.lstm1(x_t, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outputs.append(self.linear(h2))
        for _ in range(future):
            h1, c1 = self.lstm1(outputs[-1], (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outputs.append(self.linear(h2))
        return torch.cat(outputs, dim=1)


def make_model(seed: int = 0) -> Sequence:
    torch.manual_seed(seed)
    return Sequence().double()


def parse_args(doc: str, argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15, help="optimizer steps (each up to 20 evaluations)")
    parser.add_argument("--quick", action="store_true", help="20 waves of 60 samples and 2 steps: seconds")
    parser.add_argument("--plot", default=None, help="save the last step's test predictions to this PNG")
    args = parser.parse_args(argv)
    args.n, args.length = (20, 60) if args.quick else (100, 1000)
    if args.quick:
        args.steps = min(args.steps, 2)
    return args


def draw(pred: torch.Tensor, n_known: int, path: str) -> None:
    "The original's picture: each test wave's prediction, solid where the input was known, dotted beyond."
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 4))
    for wave, color in zip(pred, ("C3", "C2", "C0")):
        ax.plot(range(n_known), wave[:n_known], color=color, linewidth=1.5)
        ax.plot(range(n_known, len(wave)), wave[n_known:], color=color, linestyle=":", linewidth=1.5)
    ax.set(xlabel="step", ylabel="value", title="predictions: known input (solid), on its own outputs (dotted)")
    fig.savefig(path, dpi=100, bbox_inches="tight")


def train(steps: int = 15, n: int = 100, length: int = 1000, verbose: bool = True) -> tuple[Sequence, list[float]]:
    "Train with L-BFGS; return the model and the test loss after each step."
    x, y, x_test, y_test = split(sine_waves(n, length))
    model = make_model()
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.8)
    test_losses = []
    for step in range(steps):
        def closure():
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            return loss
        loss = optimizer.step(closure)
        with torch.no_grad():
            test_losses.append(criterion(model(x_test), y_test).item())
        if verbose:
            print(f"step {step}: train loss {loss.item():.3g} (before the step), test loss {test_losses[-1]:.3g}")
    return model, test_losses


if __name__ == "__main__":
    args = parse_args(__doc__)
    model, _ = train(args.steps, args.n, args.length)
    if args.plot:
        _, _, x_test, _ = split(sine_waves(args.n, args.length))
        with torch.no_grad():
            draw(model(x_test, future=args.length), x_test.size(1), args.plot)
