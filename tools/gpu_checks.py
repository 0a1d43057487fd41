"""Checks only a machine with CUDA can run: DDP and FSDP over NCCL, one process per GPU, in float32, bfloat16 and
float16 where the engine allows it. For each: a fit of the digits, then the same run stopped at batch 15 (its second
epoch), saved, and resumed in a fresh learner, against the run uninterrupted (the largest weight difference: 0.0 is
an exact resume); under FSDP, learn.save's file read by plain torch and loaded back into the shards.

The GPU tests and benchmarks are apart: `pytest tests/test_engine.py tests/test_engines.py tests/test_profiler.py`,
`benchmarks/amp_speedup.py`, `benchmarks/engines_digits.py`, `benchmarks/fsdp_scaling.py --gpu`,
`benchmarks/compile.py` (eager, inductor, max-autotune, reduce-overhead; the Learner against a hand-written compiled loop).
The "+compile" legs run the same checks with `learn.compile()` (inductor): the resume difference they print need not
be 0.0 (inductor's kernels for a dynamic batch size may sum in another order than for a static one), and learn.save's
keys must be the model's own, without `_orig_mod.`.
Run: python tools/gpu_checks.py
"""
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the FSDP tests' digits learner
from looplab.distributed import launch  # noqa: E402


def make_learner(kind: str, dtype, cbs=None):
    "The FSDP tests' digits learner under DDP or FSDP, in `dtype` (None: float32)."
    import fsdp_workers as w
    from looplab.engines import DistributedDataParallelEngine
    from looplab.fsdp import FSDPEngine
    if kind.endswith("+compile"):
        return make_learner(kind.removesuffix("+compile"), dtype, cbs).compile()
    if kind == "FSDP":
        return w.digits_learner(FSDPEngine(mp_dtype=dtype) if dtype else FSDPEngine(), cbs=cbs)
    learn = w.digits_learner(DistributedDataParallelEngine(), cbs=cbs)
    if dtype == torch.bfloat16:
        learn.to_bf16()
    elif dtype == torch.float16:
        learn.to_fp16()
    return learn


def leg(kind: str, dtype, tmp: str) -> dict:
    "One rank's checks of one engine and precision (run by `launch` in every process)."
    import fsdp_workers as w
    from looplab.checkpoint import load_checkpoint
    out = {}
    p = Path(tmp) / f"{kind}{dtype}.ckpt"
    full = make_learner(kind, dtype, cbs=[w.SaveAt(p, None)])
    start = time.perf_counter()
    full.fit(2)
    out["fit_s"] = round(time.perf_counter() - start, 2)
    out["engine"] = type(full.engine).__name__
    out["device"] = str(next(full.model.parameters()).device)
    out["valid_loss"] = round(full.recorder.last_valid["valid_loss"], 4)
    make_learner(kind, dtype, cbs=[w.SaveAt(p, 15)]).fit(2)  # stopped at batch 15 (epoch 2), saved there
    res = make_learner(kind, dtype, cbs=[w.SaveAt(p, None)])
    load_checkpoint(res, p)
    res.fit(2)
    wa, wb = w.full_weights(full.model), w.full_weights(res.model)
    out["resume_vs_uninterrupted_max_diff"] = max((wa[k].float() - wb[k].float()).abs().max().item() for k in wa)
    if kind.endswith("+compile"):  # the file holds the model's own keys
        full.save(Path(tmp) / "compiled.pt")
        out["saved_keys_with_orig_mod"] = sum("_orig_mod" in k for k in torch.load(Path(tmp) / "compiled.pt",
                                                                                 map_location="cpu", weights_only=True))
    if kind == "FSDP" and dtype is None:  # learn.save writes whole weights plain torch reads; learn.load shards them back
        full.save(Path(tmp) / "w.pt")
        plain = torch.load(Path(tmp) / "w.pt", map_location="cpu", weights_only=True)
        fresh = make_learner(kind, dtype)
        fresh.fit(0)
        fresh.load(Path(tmp) / "w.pt")
        back = w.full_weights(fresh.model)
        out["learn.save->torch.load->learn.load_max_diff"] = max(
            max((wa[k].cpu() - plain[k]).abs().max().item(), (back[k].cpu() - plain[k]).abs().max().item()) for k in wa)
    return out


def main():
    n_gpus = torch.cuda.device_count()  # without initialising CUDA here: the workers are forked
    if not n_gpus:
        sys.exit("tools/gpu_checks.py needs a CUDA device; torch.cuda.device_count() is 0 here")
    print(f"torch {torch.__version__}; {n_gpus} CUDA device(s); NCCL, {n_gpus} process(es)")
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, dtype in [("DDP", None), ("DDP", torch.bfloat16), ("DDP", torch.float16),
                            ("FSDP", None), ("FSDP", torch.bfloat16), ("DDP+compile", None),
                            ("DDP+compile", torch.bfloat16), ("FSDP+compile", None)]:
            try:
                r = launch(leg, nprocs=n_gpus, backend="nccl", args=(kind, dtype, tmp))[0]
                print(f"{kind:5} {str(dtype):15} OK  {r}", flush=True)
            except Exception as e:
                failed.append(f"{kind} {dtype}")
                print(f"{kind:5} {str(dtype):15} FAILED {type(e).__name__}: {str(e)[:800]}", flush=True)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
