"""The calls fastai users reach for after training: `get_preds`, `predict`, `save` and `load` (notebook 04_learner).
`get_preds` returns the model's own outputs and leaves the training state alone, bit for bit; `save`/`load` carry
the weights (and, if asked, the optimizers) and refuse another model's file before changing anything."""
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import digits_learner
from looplab.callback import Callback
from looplab.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from looplab.checks import refuses
from looplab.data import DataLoaders, load_digits, set_seed
from looplab.learner import Learner


def learner(cbs=None, **kwargs):
    "A learner on the digits with dropout and batch norm (random numbers and buffers a stray pass would change)."
    return digits_learner(lambda: nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.3),
                                                nn.Linear(32, 10)), seed=5, data_seed=7, cbs=cbs, **kwargs)


def weights(learn):
    return [t.clone() for t in learn.model.state_dict().values()]


def loader_without_generator(learn):
    "The validation set in a plain DataLoader: each iteration draws its base seed from torch's global generator."
    return DataLoader(TensorDataset(*learn.dls.valid.dataset.tensors), batch_size=100)


def same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_get_preds_are_the_models_own_outputs():
    learn = learner()
    learn.fit(1)
    preds, targets = learn.get_preds()
    learn.model.eval()
    with torch.no_grad():
        own = torch.cat([learn.model(xb) for xb, _ in learn.dls.valid])
    assert torch.equal(preds, own)
    assert torch.equal(targets, torch.cat([yb for _, yb in learn.dls.valid]))
    assert preds.device.type == "cpu" and not preds.requires_grad
    train_preds, train_targets = learn.get_preds(learn.dls.train)  # any loader
    assert len(train_preds) == len(train_targets) == len(learn.dls.train.dataset)


def test_get_preds_leaves_the_training_state_alone():
    "A fit after get_preds (and predict) is the fit without them, bit for bit: weights, buffers, losses."
    plain = learner()
    plain.fit(2)
    learn = learner()
    learn.get_preds()
    learn.get_preds(loader_without_generator(learn))
    learn.predict(learn.dls.valid.dataset[0])
    learn.fit(2)
    assert same(weights(plain), weights(learn))
    assert plain.recorder.losses == learn.recorder.losses


class PredictMidFit(Callback):
    "Calls get_preds inside a training batch and checks what a callback reads afterwards is unchanged."
    def on_batch_end(self):
        learn = self.learn
        if not learn.training:
            return
        before = (learn.training, learn.model.training, learn.xb, learn.yb, learn.preds, learn.loss, learn.iter,
                  learn.dl, learn.epoch, learn.n_iter, torch.get_rng_state())
        learn.get_preds(loader_without_generator(learn))
        after = (learn.training, learn.model.training, learn.xb, learn.yb, learn.preds, learn.loss, learn.iter,
                 learn.dl, learn.epoch, learn.n_iter, torch.get_rng_state())
        assert all(a is b for a, b in zip(before[:-1], after[:-1])) and torch.equal(before[-1], after[-1])


def test_get_preds_inside_a_fit_changes_nothing():
    plain = learner()
    plain.fit(1)
    learn = learner(cbs=[PredictMidFit()])
    learn.fit(1)
    assert same(weights(plain), weights(learn))
    assert plain.recorder.losses == learn.recorder.losses


def test_get_preds_puts_back_each_modules_mode():
    learn = learner()
    learn.model.train()
    learn.model[1].eval()  # a frozen batch norm: a mixed model must stay mixed
    learn.get_preds()
    assert [m.training for m in learn.model] == [True, False, True, True, True]


def test_get_preds_without_targets_and_with_several_outputs():
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(64, 10)

        def forward(self, x):
            out = self.body(x)
            return out, {"norm": out.norm(dim=1)}

    x, _ = load_digits()
    batches = [x[:50], x[50:120]]  # batches of inputs alone
    learn = Learner(TwoHeads(), DataLoaders(batches, batches), split_batch=lambda batch: (batch, None),
                    progress=False)
    (out, extra), targets = learn.get_preds()
    assert targets is None
    with torch.no_grad():
        assert torch.equal(out, torch.cat([learn.model.body(b) for b in batches]))
    assert extra["norm"].shape == (120,)


def test_get_preds_refuses_no_data():
    learn = learner()
    learn.dls.valid = None
    refuses(learn.get_preds, ValueError, "dls.valid is None", "get_preds(dl=")


def test_predict_one_item():
    learn = learner()
    learn.fit(1)
    preds, _ = learn.get_preds()
    item = learn.dls.valid.dataset[3]  # (x, y), as the dataset gives it
    out = learn.predict(item)
    assert out.shape == (10,)
    assert torch.allclose(out, preds[3], atol=1e-6)
    assert torch.equal(learn.predict(item[0]), out)  # the input alone
    assert learn.predict(item).argmax() == preds[3].argmax()  # a classifier's class


def test_predict_refuses_a_wrong_shape():
    learn = learner()
    x_valid = learn.dls.valid.dataset.tensors[0]
    refuses(lambda: learn.predict(x_valid[:5]), ValueError, "one item", "(5, 64)", "(64,)")
    refuses(lambda: learn.predict(torch.zeros(8, 8)), ValueError, "(8, 8)", "(64,)")


def test_save_load_weights(tmp_path):
    learn = learner()
    learn.fit(1)
    path = learn.save(tmp_path / "w.pt")
    assert [p.name for p in tmp_path.iterdir()] == ["w.pt"]  # written atomically: no temporary left
    fresh = learner()
    fresh.load(path)
    assert same(weights(learn), weights(fresh))
    assert not fresh.opts  # the weights only


def test_save_load_with_opt_continues_the_same(tmp_path):
    "Weights and optimizer state saved: a new learner trains on exactly as the saved one does."
    learn = learner()
    learn.fit(1)
    learn.save(tmp_path / "w.pt", with_opt=True)
    fresh = learner()
    fresh.load(tmp_path / "w.pt", with_opt=True)
    set_seed(1)
    learn.fit(1)
    set_seed(1)
    fresh.fit(1)
    assert same(weights(learn), weights(fresh))
    weights_only = learner()
    weights_only.load(tmp_path / "w.pt")  # a file with the optimizers, loaded without: the weights only
    assert not weights_only.opts


def test_load_refuses_another_model_and_changes_nothing(tmp_path):
    learn = learner()
    learn.save(tmp_path / "w.pt")
    other = Learner(nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10)), learn.dls, progress=False)
    before = weights(other)
    refuses(lambda: other.load(tmp_path / "w.pt"), ValueError, "another model", "missing keys", "2.weight",
            "unexpected keys", "4.weight", "0.weight (32, 64)", "nothing was loaded")
    assert same(before, weights(other))


def test_load_with_opt_refuses_a_file_without(tmp_path):
    learn = learner()
    learn.save(tmp_path / "w.pt")
    refuses(lambda: learner().load(tmp_path / "w.pt", with_opt=True), ValueError, "no optimizer state",
            "with_opt=False")
    refuses(lambda: learn.save(tmp_path / "o.pt", with_opt=True), ValueError, "no optimizer yet", "fit first")


def test_load_takes_the_weights_of_a_checkpoint(tmp_path):
    learn = learner()
    learn.fit(1)
    save_checkpoint(learn, tmp_path / "ckpt.pt")
    fresh = learner()
    fresh.load(tmp_path / "ckpt.pt")
    assert same(weights(learn), weights(fresh))


def test_load_checkpoint_on_a_weights_file_points_to_learn_load(tmp_path):
    from looplab.checkpoint import load_checkpoint
    learn = learner()
    learn.fit(1)
    learn.save(tmp_path / "w.pt", with_opt=True)
    fresh = learner()
    before = weights(fresh)
    refuses(lambda: load_checkpoint(fresh, tmp_path / "w.pt"), CheckpointError, "a model's weights",
            "learn.load(path)")
    assert same(before, weights(fresh))


def test_load_refuses_a_damaged_file(tmp_path):
    learn = learner()
    path = learn.save(tmp_path / "w.pt")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    refuses(lambda: learn.load(path), CheckpointError, "truncated or damaged")


def test_get_preds_through_an_autocast_engine():
    "The engine's autocast is used (bfloat16 on the CPU), and half-precision outputs come back as float32."
    from looplab.engine import AMPEngine
    learn = learner(engine=AMPEngine(torch.bfloat16, device="cpu"))
    preds, _ = learn.get_preds()
    assert preds.dtype == torch.float32
    learn.model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        own = torch.cat([learn.model(xb) for xb, _ in learn.dls.valid])
    assert own.dtype == torch.bfloat16 and torch.equal(preds, own.float())
    assert learn.predict(learn.dls.valid.dataset[0]).dtype == torch.float32


@pytest.mark.parametrize("saved_opt, loading_opt", [("sgd", "adam"), ("adam", "sgd")])
def test_load_refuses_another_kind_of_optimizer_before_changing_anything(tmp_path, saved_opt, loading_opt):
    opts = {"sgd": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9), "adam": torch.optim.Adam}
    saved = learner(opt_func=opts[saved_opt])
    saved.fit(1)
    path = saved.save(tmp_path / "w.pt", with_opt=True)
    other = learner(opt_func=opts[loading_opt])
    other.fit(1)
    before, opt_before = weights(other), other.opt.state_dict()
    with pytest.raises(ValueError, match="another kind than .*nothing was loaded"):
        other.load(path, with_opt=True)
    assert all(torch.equal(a, b) for a, b in zip(before, weights(other)))
    assert other.opt.state_dict()["param_groups"] == opt_before["param_groups"]
    other.fit(1)  # and it still trains
    ckpt = tmp_path / "run.pt"
    save_checkpoint(saved, ckpt)
    with pytest.raises(CheckpointError, match="another kind than .*nothing was loaded"):
        load_checkpoint(other, ckpt)


def test_predict_refuses_another_dtype_with_the_fix():
    learn = learner()
    x = learn.dls.valid.dataset.tensors[0][0]
    with pytest.raises(ValueError, match=r"dtype torch.float64.*torch.float32.*x.float\(\)"):
        learn.predict(x.double())
    assert learn.predict(x).shape == (10,)
