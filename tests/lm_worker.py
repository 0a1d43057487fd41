"""A small LSTM language model trained with its hidden state carried across batches (CarryState), for the
kill-and-resume tests of test_language_model.py: prints n_iter after every training batch, checkpoints every few
batches, resumes from the checkpoint if there is one, and saves what the tests compare."""
import argparse
from pathlib import Path

import torch

from looplab.callback import Callback
from looplab.checkpoint import load_checkpoint, read_checkpoint
from looplab.checkpoint_callback import Checkpoint
from looplab.data import DataLoaders
from looplab.learner import Learner, set_seed
from looplab.metrics import Perplexity
from looplab.regularize import RNNRegularizer
from looplab.stateful import BPTTBatches, CarryState, LSTMLanguageModel, Vocab, batchify, grammar_text


class PrintProgress(Callback):
    "Prints `n_iter` after every training batch, so that a test can kill the process at a chosen moment."
    order = 300  # after the Checkpoint

    def on_batch_end(self):
        if self.learn.training:
            print(self.learn.n_iter, flush=True)


def build_learner(ckpt=None, every=None, carry=CarryState) -> Learner:
    "An LSTM language model with dropout, AR/TAR and Adam, identical in every process that builds it."
    vocab = Vocab()
    train_ids = vocab.encode(grammar_text(500, seed=1))
    valid_ids = vocab.encode(grammar_text(60, seed=2))
    dls = DataLoaders(BPTTBatches(batchify(train_ids, 8), 25), BPTTBatches(batchify(valid_ids, 4), 25))
    set_seed(7)
    model = LSTMLanguageModel(len(vocab), 24, 24, n_layers=2, dropout=0.3, activations=True)
    cbs = [carry(), RNNRegularizer(alpha=1.0, beta=1.0), PrintProgress()]
    if every:
        cbs.append(Checkpoint(ckpt, every_n_batches=every, at_epoch_end=True))
    learn = Learner(model, dls, lr=3e-3, opt_func=torch.optim.Adam, metrics=[Perplexity()], cbs=cbs)
    learn.remove_cbs(learn.progress)
    return learn


def results(learn: Learner, resumed_from: dict) -> dict:
    "What the tests compare: parameters, every recorded loss and perplexity, and where the run resumed from."
    rows = learn.recorder.values
    return {"params": [p.detach().clone() for p in learn.model.parameters()],
            "losses": torch.tensor(learn.recorder.losses, dtype=torch.float64),
            "values": {key: torch.tensor([r[key] for r in rows], dtype=torch.float64)
                       for key in ("train_loss", "valid_loss", "perplexity")},
            "n_iter": learn.n_iter, "resumed_from": resumed_from}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", help="where to save the results")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--ckpt", help="the checkpoint file: resumed from if it exists")
    parser.add_argument("--every", type=int, help="checkpoint every this many training batches")
    args = parser.parse_args()
    torch.set_num_threads(1)
    learn = build_learner(args.ckpt, args.every)
    resumed_from = {}
    if args.ckpt and Path(args.ckpt).exists():
        load_checkpoint(learn, args.ckpt)
        resumed_from = read_checkpoint(args.ckpt)["state"]["loop"]
    learn.fit(args.epochs)
    torch.save(results(learn, resumed_from), args.out)


if __name__ == "__main__":
    main()
