"""Train the digits with every engine this machine can run and print accuracy and time per epoch, side by side.

The same seed, model (64-256-256-10 MLP), data order and optimizer for each: float32 on the CPU, bfloat16 autocast
on the CPU, and where CUDA is present float32, float16 (with loss scaling) and bfloat16 on the GPU. Accuracy
should agree within a point; the times are a ratio against float32 on the same device, measured in this run.
Run: python benchmarks/engines_digits.py [--epochs N]
"""
import argparse
import time
from functools import partial

import torch
from torch import nn

from looplab.data import DataLoaders, load_digits, set_seed
from looplab.engine import AMPEngine, DeviceEngine
from looplab.learner import Learner
from looplab.metrics import Accuracy


def engines() -> list[tuple[str, callable]]:
    "(label, engine factory) for every engine this machine runs."
    found = [("cpu float32", lambda: DeviceEngine("cpu")),
             ("cpu bfloat16 autocast", lambda: AMPEngine(torch.bfloat16, device="cpu"))]
    if torch.cuda.is_available():
        found += [("cuda float32", lambda: DeviceEngine("cuda")),
                  ("cuda float16 + GradScaler", lambda: AMPEngine(torch.float16, device="cuda")),
                  ("cuda bfloat16 autocast", lambda: AMPEngine(torch.bfloat16, device="cuda"))]
    return found


def train(make_engine, n_epochs: int) -> dict:
    set_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    learn = Learner(model, DataLoaders.from_tensors(*load_digits(), bs=64, seed=42), lr=0.05, metrics=[Accuracy()],
                    opt_func=partial(torch.optim.SGD, momentum=0.9), engine=make_engine())
    learn.remove_cbs(learn.progress)
    learn.fit(1)  # warm-up: kernels, allocator, autocast caches
    start = time.perf_counter()
    learn.fit(n_epochs)  # a second fit trains n_epochs more epochs, continuing from the warm-up's weights
    if learn.engine.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / n_epochs
    on = next(learn.model.parameters()).device
    return {"accuracy": learn.recorder.values[-1]["accuracy"], "epoch_s": seconds, "skipped": learn.recorder.n_skipped,
            "params_on": str(on), "engine": repr(learn.engine)}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()
    print(f"torch {torch.__version__}; CUDA: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
    base = {}
    for label, make in engines():
        r = train(make, args.epochs)
        device = label.split()[0]
        base.setdefault(device, r["epoch_s"])
        print(f"{label:28s} accuracy {r['accuracy']:.4f}  {r['epoch_s'] * 1e3:7.1f} ms/epoch "
              f"({r['epoch_s'] / base[device]:.2f}x {device} float32)  skipped steps {r['skipped']:3d}  "
              f"weights on {r['params_on']}  {r['engine']}")


if __name__ == "__main__":
    main()
