"learn.compile: graphs per epoch, files without _orig_mod., exact resume in a new process, hooks, precision, DDP, inductor."
import random
import warnings
from functools import partial
from pathlib import Path

import pytest
import torch
import torch._dynamo
import torch._inductor.config
from torch import nn

from helpers import digits_learner, run_worker
from looplab.activations import ActivationStats
from looplab.checkpoint import load_checkpoint, save_checkpoint
from looplab.distributed import launch
from looplab.engine import AMPEngine
from looplab.engine_compile import RecompileWarning
from looplab.hooks import HookCallback
from looplab.monitor import SaveBestModel
from looplab.profiler import Profiler

WORKER = Path(__file__).with_name("compile_worker.py")


def mlp():
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def learner(**kwargs):
    "The digits in batches of 64 (23 training batches, the last of 30) with a 64-64-10 MLP, seeded, silent."
    return digits_learner(mlp, seed=0, **kwargs)


class CountGraphs:
    "A torch.compile backend that counts the graphs it is given and runs each as traced (eagerly)."
    def __init__(self):
        self.n = 0

    def __call__(self, gm, example_inputs):
        self.n += 1
        return gm.forward


@pytest.fixture(autouse=True)
def fresh_dynamo():
    "Each test compiles from nothing: dynamo's caches would otherwise serve one test's graphs to the next."
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_the_graphs_after_one_epoch_are_all_there_will_be():
    count = CountGraphs()
    learn = learner().compile(backend=count)
    learn.fit(1)
    after_one = count.n
    learn.fit(5)  # a new fit of 5 epochs from epoch 0: every shape and mode again, five times
    assert after_one == count.n == 3  # a full training batch, the short last one (dynamic from then), validation
    eager = learner()
    eager.fit(1)
    compiled = learner().compile(backend="aot_eager")
    compiled.fit(1)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(eager.model.parameters(), compiled.model.parameters()))


def test_files_hold_the_model_own_keys_and_load_into_either_learner(tmp_path):
    learn = learner(cbs=[SaveBestModel(path=tmp_path / "best.pt")]).compile(backend="aot_eager")
    learn.fit(1)
    assert type(learn.model) is nn.Sequential  # the fit's wrapper is gone; learn.compile stays for the next fit
    learn.save(tmp_path / "w.pt")
    save_checkpoint(learn, tmp_path / "ckpt.pt")
    keys = ["0.weight", "0.bias", "2.weight", "2.bias"]
    for name in ("w.pt", "best.pt"):
        weights = torch.load(tmp_path / name, weights_only=True)
        assert list(weights) == keys, name
        plain = mlp()
        plain.load_state_dict(weights)  # plain torch, into an uncompiled model
    compiled, eager = learner().compile(backend="aot_eager"), learner()
    for other in (compiled, eager):
        other.load(tmp_path / "w.pt")
        assert all(torch.equal(a, b) for a, b in zip(learn.model.parameters(), other.model.parameters()))
    resumed = learner().compile(backend="aot_eager")
    load_checkpoint(resumed, tmp_path / "ckpt.pt")
    assert all(torch.equal(a, b) for a, b in zip(learn.model.parameters(), resumed.model.parameters()))


def test_a_compiled_run_stopped_mid_epoch_resumes_bit_for_bit_in_a_new_process(tmp_path):
    stop_at = random.Random().randint(24, 45)  # inside the second epoch (23 batches each)
    whole = run_worker(WORKER, tmp_path / "whole.pt")
    run_worker(WORKER, tmp_path / "stopped.pt", "--stop-at", stop_at, "--ckpt", tmp_path / "ckpt.pt")
    resumed = run_worker(WORKER, tmp_path / "resumed.pt", "--resume", tmp_path / "ckpt.pt")
    assert all(torch.equal(a, b) for a, b in zip(whole["params"], resumed["params"])), f"stopped at {stop_at}"
    assert torch.equal(whole["losses"], resumed["losses"]) and torch.equal(whole["valid"], resumed["valid"])


def test_activation_stats_and_hooks_record_what_an_eager_model_records():
    warnings.simplefilter("ignore")
    eager_stats, compiled_stats = ActivationStats(), ActivationStats()
    learner(cbs=[eager_stats]).fit(1)
    compiled = learner(cbs=[compiled_stats]).compile(backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileWarning)  # its hook changes no value dynamo checks
        compiled.fit(1)
    for name, means in eager_stats.means.items():
        assert len(means) == 23 and (means == compiled_stats.means[name]).all(), name
    assert compiled_stats.n_calls == eager_stats.n_calls
    seen = {"eager": [], "compiled": []}

    class Outputs(HookCallback):
        "A hook that appends to a list: dynamo guards on its length, so it recompiles until recompile_limit, then runs eagerly."
        def __init__(self, modules, key):
            super().__init__(modules)
            self.key = key

        def hook(self, module, inputs, outputs):
            seen[self.key].append(outputs.detach().clone())
    eager = learner()
    eager.fit(2, cbs=[Outputs([eager.model[1]], "eager")])
    again = learner().compile(backend="aot_eager")  # a model of the same code: dynamo's cache from above serves it
    again.fit(2, cbs=[Outputs([again.model[1]], "compiled")])
    assert len(seen["eager"]) == len(seen["compiled"]) == 2 * 23  # every training batch
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(seen["eager"], seen["compiled"]))
    profiler = Profiler()
    compiled.fit(1, cbs=[profiler])
    assert profiler.n_batches == 23 and (profiler.batch_times() > 0).all()


def test_a_hook_that_changes_what_dynamo_guards_every_batch_is_named_by_a_warning():
    class Counting(HookCallback):
        "Keeps a count in a plain int: dynamo guards on it, so every batch is a new graph."
        def __init__(self, modules):
            super().__init__(modules)
            self.calls = 0

        def hook(self, module, inputs, outputs):
            self.calls += 1
            self.last = outputs.detach().clone()
    learn = learner()
    learn.compile(backend="aot_eager")
    with pytest.warns(RecompileWarning, match=r"(?s)compiled \d+ times, 6 of them because.*self\.calls.*test_compile\.py"):
        learn.fit(1, cbs=[Counting([learn.model[1]])])


def test_compile_and_precision_in_either_order_and_refusals():
    first = learner().compile(backend="aot_eager").to_bf16()
    second = learner().to_bf16().compile(backend="aot_eager")
    for learn in (first, second):
        assert isinstance(learn.engine, AMPEngine) and learn.compile_options is not None
        learn.fit(1)
    assert all(torch.equal(a, b) for a, b in zip(first.model.parameters(), second.model.parameters()))
    with pytest.raises(TypeError, match="not model"):
        learner().compile(model=mlp())
    with pytest.raises(ValueError, match="no-such"):
        learner().compile(backend="no-such")
    by_hand = digits_learner(lambda: torch.compile(mlp(), backend="aot_eager"), seed=0)
    by_hand.save  # noqa: B018 -- what follows is the fit, refused before its first batch
    with pytest.raises(ValueError, match=r"learn\.compile\(\.\.\.\)"):
        by_hand.fit(1)


def test_lbfgs_steps_through_a_compiled_model():
    opt = partial(torch.optim.LBFGS, max_iter=3)
    eager, compiled = learner(opt_func=opt, lr=0.5), learner(opt_func=opt, lr=0.5).compile(backend="aot_eager")
    for learn in (eager, compiled):
        learn.fit(1)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(eager.model.parameters(), compiled.model.parameters()))


def ddp_compiled(compile_: bool):
    "One rank's parameters after two epochs of the digits under DDP, compiled or not."
    from looplab.engines import DistributedDataParallelEngine
    learn = digits_learner(mlp, seed=0, engine=DistributedDataParallelEngine(device="cpu"))
    if compile_:
        learn.compile(backend="aot_eager")
    learn.fit(2)
    return [p.detach().clone() for p in learn.model.parameters()], learn.n_steps


def test_ddp_with_gloo_trains_a_compiled_model_as_the_eager_one():
    compiled = launch(ddp_compiled, nprocs=2, args=(True,))
    eager = launch(ddp_compiled, nprocs=2, args=(False,))
    assert compiled[0][1] == eager[0][1] > 0
    assert all(torch.equal(a, b) for a, b in zip(compiled[0][0], compiled[1][0]))  # the ranks agree bit for bit
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(compiled[0][0], eager[0][0]))


def test_inductor_compiles_the_digits_model_and_saves_plain_keys(tmp_path):
    "The one inductor test (about 20 s here): a C++ kernel compiled for this CPU, trained as the eager model."
    eager = learner()
    eager.fit(1)
    compiled = learner().compile()  # torch.compile's default backend
    with torch._inductor.config.patch(force_disable_caches=True):  # kernels cached on disk by a run under another
        compiled.fit(1)                                             # ATEN_CPU_CAPABILITY can compute garbage here
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(eager.model.parameters(), compiled.model.parameters()))
    compiled.save(tmp_path / "w.pt")
    assert list(torch.load(tmp_path / "w.pt", weights_only=True)) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def fsdp_compiled(compile_: bool):
    "One rank's whole weights after an epoch of the FSDP tests' digits learner, compiled or not."
    import fsdp_workers as w
    from looplab.fsdp import FSDPEngine
    learn = w.adam_digits_learner(FSDPEngine())
    if compile_:
        learn.compile(backend="aot_eager")
    learn.fit(1)
    return {k: v.clone() for k, v in w.full_weights(learn.model).items()}


def test_fsdp_with_gloo_trains_a_compiled_model_as_the_eager_one():
    compiled = launch(fsdp_compiled, nprocs=2, args=(True,))
    eager = launch(fsdp_compiled, nprocs=2, args=(False,))
    assert all(torch.equal(compiled[0][k], eager[0][k]) for k in eager[0])  # aot_eager runs torch's own kernels
    assert "_orig_mod" not in "".join(compiled[0])
