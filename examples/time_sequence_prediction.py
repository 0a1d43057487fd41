"""pytorch/examples' time_sequence_prediction with looplab: two stacked LSTM cells learn sine waves with L-BFGS.

    python examples/time_sequence_prediction.py [--steps 15] [--quick] [--plot predictions.png]

The same waves, model and seed as examples/time_sequence_prediction_plain.py (whose docstring says what changed
from the original). The loop is the Learner's: `opt_func=torch.optim.LBFGS` is all it takes, as the Learner steps
an optimizer that needs a closure through one that evaluates the batch again. The whole training set is one
batch, so an epoch is one optimizer step, and the validation pass after it is the original's test loss."""
import torch
from torch import nn

from looplab import DataLoaders, Learner
from looplab.callback import Callback

from time_sequence_prediction_plain import draw, make_model, parse_args, sine_waves, split


class PrintEvaluations(Callback):
    "The original prints the loss of every evaluation L-BFGS asks for: each one is a backward, with its events."
    def on_backward_end(self):
        print(f"  evaluation loss {self.learn.loss_grad.item():.4g}")


def train(steps: int = 15, n: int = 100, length: int = 1000, verbose: bool = True) -> Learner:
    "Train with L-BFGS through the Learner; return it (`learn.recorder.values`: the test loss after each step)."
    x, y, x_test, y_test = split(sine_waves(n, length))
    dls = DataLoaders.from_tensors(x, y, bs=len(x), shuffle=False, valid=(x_test, y_test))
    learn = Learner(make_model(), dls, loss_func=nn.MSELoss(), opt_func=torch.optim.LBFGS, lr=0.8,
                    progress=verbose)
    learn.fit(steps)
    return learn


if __name__ == "__main__":
    args = parse_args(__doc__)
    learn = train(args.steps, args.n, args.length)
    if args.plot:
        _, _, x_test, _ = split(sine_waves(args.n, args.length))
        with torch.no_grad():
            draw(learn.model(x_test, future=args.length), x_test.size(1), args.plot)
