"""Train a small MLP on the digits, unchanged on one process or many.

    python examples/train_digits.py                       # one process
    torchrun --nproc_per_node 2 examples/train_digits.py  # two processes (DDP; gloo on CPU, NCCL on GPUs)

Under torchrun (RANK is set) the engine is DistributedDataParallelEngine: each rank trains on its shard of every
global batch of --bs items, the progress table is printed by rank 0 only, and the metrics are over every rank."""
import argparse
import json
import os
from functools import partial

import torch
from torch import nn

from looplab.data import DataLoaders, load_digits, set_seed
from looplab.engine import DeviceEngine
from looplab.engines import DistributedDataParallelEngine
from looplab.learner import Learner
from looplab.metrics import Accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--bs", type=int, default=64, help="global batch size, over all processes")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", default=None, help="write the final metrics as JSON here (rank 0)")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    engine = DistributedDataParallelEngine() if "RANK" in os.environ else DeviceEngine()
    set_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    learn = Learner(model, DataLoaders.from_tensors(*load_digits(), bs=args.bs), lr=args.lr, metrics=[Accuracy()],
                    opt_func=partial(torch.optim.SGD, momentum=0.9), engine=engine)
    learn.fit(args.epochs)
    valid_items = int(engine.sync_tensor(torch.tensor(learn.recorder.valid_loss.count), "sum"))
    if args.out and engine.is_master_process:
        row = learn.recorder.values[-1]
        with open(args.out, "w") as f:
            json.dump({"world_size": engine.world_size, "accuracy": row["accuracy"], "valid_loss": row["valid_loss"],
                       "valid_items": valid_items}, f)
    if isinstance(engine, DistributedDataParallelEngine):
        engine.close()  # every rank done, then the process group destroyed


if __name__ == "__main__":
    main()
