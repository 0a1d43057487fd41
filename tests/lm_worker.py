"""A small LSTM language model trained with its hidden state carried across batches (CarryState), for the
kill-and-resume tests of test_language_model.py: prints n_iter after every training batch, checkpoints every few
batches, resumes from the checkpoint if there is one, and saves what the tests compare."""
import torch

from looplab.checkpoint_callback import Checkpoint
from looplab.data import DataLoaders, set_seed
from looplab.learner import Learner
from looplab.metrics import Perplexity
from looplab.regularize import RNNRegularizer
from looplab.stateful import BPTTBatches, CarryState, LSTMLanguageModel, Vocab, batchify, grammar_text
from helpers import PrintProgress, kill_and_resume_parser, resume_if_saved, run_results


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
    return run_results(learn, ("train_loss", "valid_loss", "perplexity"), resumed_from)


def main() -> None:
    args = kill_and_resume_parser(__doc__).parse_args()  # --ckpt: resumed from if it exists
    torch.set_num_threads(1)
    learn = build_learner(args.ckpt, args.every)
    resumed_from = resume_if_saved(learn, args.ckpt)
    learn.fit(args.epochs)
    torch.save(results(learn, resumed_from), args.out)


if __name__ == "__main__":
    main()
