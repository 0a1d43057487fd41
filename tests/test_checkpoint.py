"""Checkpoints across real processes: exact resume in a new process, SIGKILL at random moments, a kill during a
write, elastic sampler state, and damaged files that give a clear error while the previous checkpoint still works."""
import contextlib
import os
import random
import signal
import struct
import subprocess
import sys
import time
import warnings
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from torch import nn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from looplab.callback import Callback
from looplab.checkpoint import (CheckpointError, atomic_save, load_checkpoint, read_checkpoint, save_checkpoint,
                                state_digest)
from looplab.checkpoint_callback import Checkpoint
from looplab.data import DataLoaders, collate_batch, load_digits
from looplab.resume import make_epochwise_batch_sampler
from looplab.sampler_chain import make_batch_sampler
from helpers import started
from resume_worker import build_learner, results

WORKER = Path(__file__).resolve().parent / "resume_worker.py"
N_PER_EPOCH = 45  # training batches per epoch in resume_worker: 1,438 training digits in batches of 32
TIMEOUT = 300


def worker(out: Path, *args) -> list[str]:
    "The command line that runs resume_worker.py."
    return [sys.executable, str(WORKER), str(out), *map(str, args)]


def run_workers(commands: list[list[str]]) -> None:
    "Run the commands side by side, each in its own process, and check that every one succeeded."
    with contextlib.ExitStack() as stack:
        procs = [stack.enter_context(started(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
                 for cmd in commands]
        errors = [proc.communicate(timeout=TIMEOUT)[1] for proc in procs]
    for cmd, proc, err in zip(commands, procs, errors):
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{err}"


def load(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def assert_same_run(result: dict, reference: dict, label: str) -> None:
    "Bit-identical parameters, batch losses, per-epoch losses and metrics, and random draws."
    assert all(torch.equal(p, q) for p, q in zip(result["params"], reference["params"])), f"{label}: parameters differ"
    assert torch.equal(result["losses"], reference["losses"]), f"{label}: recorded batch losses differ"
    for key, values in reference["values"].items():
        assert torch.equal(result["values"][key], values), f"{label}: the recorded {key} per epoch differs"
    assert result["draws"] == reference["draws"] and result["n_iter"] == reference["n_iter"], label


pytestmark = pytest.mark.usefixtures("one_thread")  # the fixture is conftest's


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    "Two epochs without a break and without checkpoints, in a process of its own."
    out = tmp_path_factory.mktemp("reference") / "reference.pt"
    run_workers([worker(out)])
    result = load(out)
    assert result["n_iter"] == 2 * N_PER_EPOCH and result["resumed_from"] == {}
    return result


# (a) stop at batch k (or at an epoch's end), save, load in a new process, continue
STOPS = {  # checkpoint file: the position it holds, epoch and first batch not yet trained on
    "batch7": {"epoch": 0, "iter": 7, "n_iter": 7, "n_steps": 7},  # in the middle of epoch 0
    "batch45": {"epoch": 0, "iter": 45, "n_iter": 45, "n_steps": 45},  # after the last batch of epoch 0, before validation
    "epoch0": {"epoch": 1, "iter": 0, "n_iter": 45, "n_steps": 45},  # at the end of epoch 0
    "batch46": {"epoch": 1, "iter": 1, "n_iter": 46, "n_steps": 46},  # after the first batch of epoch 1
}


def test_resume_in_a_new_process_is_bit_identical(tmp_path, reference):
    "One run saves at each position and stops after batch 46; a new process resumes from each file."
    base = tmp_path / "ckpt"
    run_workers([worker(tmp_path / "stopped.pt", "--ckpt", base, "--save-at", 7, 45, 46, "--save-at-epoch", 0,
                        "--stop-after-batch", 46)])
    assert load(tmp_path / "stopped.pt")["n_iter"] == 46
    for name, position in STOPS.items():
        assert read_checkpoint(f"{base}-{name}.pt")["state"]["loop"] == position, name
    run_workers([worker(tmp_path / f"resumed-{name}.pt", "--ckpt", base, "--resume", f"{base}-{name}.pt")
                 for name in STOPS])
    for name, position in STOPS.items():
        result = load(tmp_path / f"resumed-{name}.pt")
        assert result["resumed_from"] == position, name
        assert_same_run(result, reference, f"resumed from {name}")


# (b) SIGKILL at random moments, resume from the last checkpoint
def kill_after(cmd: list[str], n_iter: int, extra_delay: float) -> subprocess.Popen:
    "Start `cmd`, wait until it has trained batch `n_iter`, wait `extra_delay` seconds more, and SIGKILL it."
    with started(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        for line in proc.stdout:
            if line.strip().isdigit() and int(line) >= n_iter:
                break
        time.sleep(extra_delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=TIMEOUT)
        assert proc.returncode == -signal.SIGKILL, f"the process ended before the kill:\n{proc.stderr.read()}"
    return proc


def kill_and_resume(tmp_path: Path, trial: int, first_kill: int, second_kill: int, extra_delays: tuple) -> dict:
    "Kill a checkpointing run after `first_kill`, its resumed run after `second_kill`, and let a third one finish."
    ckpt = tmp_path / f"trial{trial}.pt"
    out = tmp_path / f"trial{trial}-out.pt"
    cmd = worker(out, "--ckpt", ckpt, "--every", 4, "--at-epoch-end", "--resume", ckpt)
    saved = []
    for target, delay in zip((first_kill, second_kill), extra_delays):
        kill_after(cmd, target, delay)
        assert not out.exists()
        saved.append(read_checkpoint(ckpt)["state"]["loop"]["n_iter"])
    run_workers([cmd])
    result = load(out)
    assert result["resumed_from"]["n_iter"] == saved[-1] >= second_kill - 3  # a checkpoint every 4 batches at least
    assert first_kill - 3 <= saved[0] <= saved[1]
    return result


def test_sigkill_at_random_moments_then_resume_gives_the_uninterrupted_run(tmp_path, reference):
    "Three trials side by side, each killed twice at random batches (plus a random delay) before it may finish."
    rng = random.Random(12)
    total = 2 * N_PER_EPOCH
    trials = []
    for trial in range(3):
        first_kill = rng.randrange(5, total // 2)
        second_kill = rng.randrange(first_kill + 5, total - 25)  # well before the end, so that the kill comes first
        trials.append((trial, first_kill, second_kill, (rng.uniform(0, 0.02), rng.uniform(0, 0.02))))
    with ThreadPoolExecutor(len(trials)) as pool:
        futures = {pool.submit(kill_and_resume, tmp_path, *t): t for t in trials}
        for future, (trial, first_kill, second_kill, _) in futures.items():
            assert_same_run(future.result(), reference,
                            f"trial {trial}, killed after batches {first_kill} and {second_kill}")


def test_a_kill_during_a_write_leaves_the_previous_checkpoint_intact(tmp_path):
    "Checkpoints of 64 MiB, written after every batch: the process is killed while its temporary file exists."
    ckpt = tmp_path / "big.pt"
    tmp_file = tmp_path / "big.pt.tmp"
    caught_mid_write = False
    for attempt in range(5):
        tmp_file.unlink(missing_ok=True)
        with started(worker(tmp_path / "never.pt", "--ckpt", ckpt, "--every", 1, "--ballast-mb", 64, "--resume", ckpt),
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
            deadline = time.monotonic() + TIMEOUT
            while not (ckpt.exists() and tmp_file.exists()) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.001)
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=TIMEOUT) == -signal.SIGKILL, proc.stderr.read().decode()
        caught_mid_write = tmp_file.exists()
        if caught_mid_write:
            break
    assert caught_mid_write, "no kill landed during a write in 5 attempts"
    latest = read_checkpoint(ckpt)["state"]
    assert latest["model"]["ballast"].shape == (64 * 2**18,)
    if ckpt.with_name("big.pt.prev").exists():
        previous = read_checkpoint(ckpt.with_name("big.pt.prev"))["state"]
        assert previous["loop"]["n_iter"] <= latest["loop"]["n_iter"]
    learn = build_learner(ckpt, every=1, ballast_mb=64)
    load_checkpoint(learn, ckpt)  # the run continues from the last complete checkpoint
    assert learn.n_iter == latest["loop"]["n_iter"]
    for path in tmp_path.glob("big.pt*"):  # 64 MiB each: do not leave them in the temporary directory
        path.unlink()


# (c) elastic: the sampler state of 2 workers, resumed under 1 and under 3
def test_elastic_sampler_state_resumes_the_global_order_under_another_number_of_workers(tmp_path):
    n, bs, seed, k = 1000, 8, 5, 13  # k batches per worker before the save

    def sampler(num_workers, rank):
        return make_batch_sampler(range(n), "training", shuffle_seed=seed, num_workers=num_workers, rank=rank,
                                  batch_size=bs)

    def take(batch_sampler, n_batches):
        batches = iter(batch_sampler)
        return [next(batches) for _ in range(n_batches)]

    def interleave(per_rank):
        "The global stream of items: position p belongs to rank p % num_workers (sharding is below batching)."
        items = [[i for batch in batches for i in batch] for batches in per_rank]
        return [items[p % len(items)][p // len(items)] for p in range(sum(map(len, items)))]

    global_order = [i for batch in take(sampler(1, 0), 2 * n // bs) for i in batch]  # two epochs, one worker
    assert sorted(global_order[:n]) == list(range(n)) and sorted(global_order[n:]) == list(range(n))
    before = [sampler(2, rank) for rank in range(2)]
    seen = interleave([take(s, k) for s in before])
    assert seen == global_order[:2 * k * bs]
    for rank, s in enumerate(before):  # each worker writes its sampler state into a file, as a checkpoint would
        state_digest(s.state_dict())  # plain data: a TypeError otherwise
        atomic_save({"data_order": s.state_dict()}, tmp_path / f"rank{rank}.pt")
    for num_workers in (1, 3):
        resumed = []
        for rank in range(num_workers):
            s = sampler(num_workers, rank)
            s.load_state_dict(load(tmp_path / f"rank{rank % 2}.pt")["data_order"])
            resumed.append(s)
        rest = interleave([take(s, (n - len(seen)) // (num_workers * bs) + 1) for s in resumed])
        assert rest == global_order[len(seen):len(seen) + len(rest)], f"resumed under {num_workers} workers"
        epoch = seen + rest[:n - len(seen)]
        assert sorted(epoch) == list(range(n)), f"an item lost or repeated under {num_workers} workers"


def test_sampler_state_of_another_dataset_size_or_type_is_refused(tmp_path):
    build_learner(tmp_path / "a.pt", every=3, stop_after_batch=3).fit(1)
    wrong_size = build_learner()
    wrong_size.dls = DataLoaders.from_tensors(*load_digits(), bs=32, seed=3, valid_pct=0.3)
    with pytest.raises(CheckpointError, match=r"a\.pt.*does not fit this learner.*n=1438"):
        load_checkpoint(wrong_size, tmp_path / "a.pt")
    other_type = build_learner()
    dataset = other_type.dls.train.dataset
    other_type.dls.train = torch.utils.data.DataLoader(dataset, collate_fn=collate_batch,
                                                       batch_sampler=make_epochwise_batch_sampler(
                                                           dataset, shuffle_seed=3, num_workers=1, rank=0,
                                                           batch_size=32))
    with pytest.raises(CheckpointError, match="a.pt.*does not fit this learner.*EpochBatchSampler"):
        load_checkpoint(other_type, tmp_path / "a.pt")


# (d) damaged files: a clear error, and the previous checkpoint still continues the run exactly
@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory) -> Path:
    "A run checkpointed after batches 5 and 10 (the first kept as .prev), stopped after batch 10."
    path = tmp_path_factory.mktemp("damage") / "ckpt.pt"
    build_learner(path, every=5, stop_after_batch=10).fit(2)
    assert read_checkpoint(path)["state"]["loop"]["n_iter"] == 10
    assert read_checkpoint(path.with_name("ckpt.pt.prev"))["state"]["loop"]["n_iter"] == 5
    return path


def damage(path: Path, data: bytes, target: Path) -> Path:
    target.write_bytes(data)
    prev = path.with_name("ckpt.pt.prev")
    target.with_name(target.name + ".prev").write_bytes(prev.read_bytes())
    return target


def test_damaged_checkpoint_gives_a_clear_error_and_the_previous_one_continues_exactly(tmp_path, two_checkpoints):
    whole = two_checkpoints.read_bytes()
    flipped = bytearray(whole)
    flipped[len(whole) // 2] ^= 0x10
    cases = {"truncated": whole[:len(whole) // 2], "empty": b"", "flipped": bytes(flipped),
             "garbage": random.Random(0).randbytes(len(whole))}
    for name, data in cases.items():
        path = damage(two_checkpoints, data, tmp_path / f"{name}.pt")
        with pytest.raises(CheckpointError, match=rf"{name}\.pt'.*(truncated|damaged).*{name}\.pt\.prev"):
            load_checkpoint(build_learner(), path)
    reference = build_learner()
    reference.fit(2)
    resumed = build_learner(two_checkpoints, every=5, stop_after_batch=None)
    torch.manual_seed(1234)  # other generator states, as in a new process
    load_checkpoint(resumed, tmp_path / "truncated.pt.prev")
    resumed.fit(2)
    assert_same_run(results(resumed, {}, 0.0), results(reference, {}, 0.0), "resumed from .prev")


def read_changed(path: Path) -> dict | None:
    "read_checkpoint(path), or None if it refuses the file; torch's warning for a changed pickle protocol is expected."
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ckpt = read_checkpoint(path)
        except CheckpointError:
            ckpt = None
    unexpected = [str(w.message) for w in caught if not str(w.message).startswith("Detected pickle protocol")]
    assert not unexpected, unexpected
    return ckpt


# derandomized: the same bytes every run, so that a run's outcome and output never depend on which byte was drawn
@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_changed_byte_anywhere_is_refused_or_harmless(tmp_path, two_checkpoints, data):
    "One changed byte, anywhere in the file: a CheckpointError, or (in bytes nothing reads) the very same state."
    whole = bytearray(two_checkpoints.read_bytes())
    position = data.draw(st.integers(0, len(whole) - 1))
    whole[position] ^= data.draw(st.integers(1, 255))
    path = tmp_path / "changed.pt"
    path.write_bytes(bytes(whole))
    ckpt = read_changed(path)
    if ckpt is not None:
        assert state_digest(ckpt["state"]) == read_checkpoint(two_checkpoints)["header"]["sha256"]


def test_a_changed_pickle_protocol_byte_is_read_quietly_and_harmless(tmp_path, two_checkpoints):
    "The byte a random change rarely hits: torch would warn that the protocol is not its own; the digest says the state is intact."
    whole = bytearray(two_checkpoints.read_bytes())
    with zipfile.ZipFile(two_checkpoints) as archive:
        entry = next(info for info in archive.infolist() if info.filename.endswith("/data.pkl"))
    name_length, extra_length = struct.unpack("<HH", whole[entry.header_offset + 26:entry.header_offset + 30])
    start = entry.header_offset + 30 + name_length + extra_length  # the pickle: PROTO opcode, then the protocol
    assert whole[start:start + 2] == b"\x80\x02"
    whole[start + 1] = 3
    path = tmp_path / "protocol.pt"
    path.write_bytes(bytes(whole))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's note on the protocol is not passed on: the digest has the last word
        ckpt = read_checkpoint(path)
    assert state_digest(ckpt["state"]) == read_checkpoint(two_checkpoints)["header"]["sha256"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(0, 1, exclude_max=True))
def test_a_truncated_checkpoint_is_always_refused(tmp_path, two_checkpoints, fraction):
    whole = two_checkpoints.read_bytes()
    path = tmp_path / "cut.pt"
    path.write_bytes(whole[:int(fraction * len(whole))])
    with pytest.raises(CheckpointError, match="cut.pt"):
        read_checkpoint(path)


def test_pickled_objects_are_refused_when_reading_and_when_saving(tmp_path):
    path = tmp_path / "pickled.pt"
    torch.save({"header": {"format": "looplab.checkpoint", "format_version": 1}, "state": {"x": Path("a")}}, path)
    with pytest.raises(CheckpointError, match="pickled.pt.*pathlib.*Path.*full unpickler"):
        read_checkpoint(path)
    learn = build_learner()
    learn.recorder.state_dict = lambda: {"losses": [random.Random(0)]}
    with pytest.raises(TypeError, match=r"state\['callbacks'\]\['recorder'\]\['losses'\]\[0\].*random.Random"):
        save_checkpoint(learn, tmp_path / "never.pt")
    assert not (tmp_path / "never.pt").exists() and not (tmp_path / "never.pt.tmp").exists()


def test_a_checkpoint_refused_before_loading_says_nothing_was_loaded_and_changes_nothing(tmp_path):
    "A file that fails the first checks says 'nothing was loaded' (and the learner is as it was); a later refusal says 'may be partly loaded'."
    saved = build_learner(tmp_path / "ckpt.pt", every=5, stop_after_batch=5)
    saved.fit(1)
    other = build_learner(tmp_path / "ckpt.pt", every=5)
    other.model[3] = nn.Linear(64, 11)
    before = [p.detach().clone() for p in other.model.parameters()]
    with pytest.raises(CheckpointError, match=r"ckpt.pt' does not fit this learner .*3.weight \(10, 64\).*; nothing was loaded$"):
        load_checkpoint(other, tmp_path / "ckpt.pt")
    assert all(torch.equal(p, q) for p, q in zip(before, other.model.parameters()))
    assert not other.opts and not other.resuming and other.n_iter == 0
    reordered = build_learner(tmp_path / "ckpt.pt", every=5)
    reordered.dls = DataLoaders.from_tensors(*load_digits(), bs=32, seed=4)  # passes the first checks
    with pytest.raises(CheckpointError, match="seed.*the learner may be partly loaded"):
        load_checkpoint(reordered, tmp_path / "ckpt.pt")


def test_not_a_checkpoint_and_missing_files(tmp_path):
    torch.save(build_learner().model.state_dict(), tmp_path / "weights.pt")
    with pytest.raises(CheckpointError, match="weights.pt.*a model's weights.*learn.load"):
        read_checkpoint(tmp_path / "weights.pt")
    torch.save({"epoch": 3}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="other.pt.*not a looplab checkpoint"):
        read_checkpoint(tmp_path / "other.pt")
    with pytest.raises(FileNotFoundError, match="nothing.pt"):
        read_checkpoint(tmp_path / "nothing.pt")
    with pytest.raises(ValueError, match="is a directory"):
        read_checkpoint(tmp_path)


def test_checkpoint_arguments_are_checked(tmp_path):
    with pytest.raises(TypeError, match="path must be a str or os.PathLike, got None"):
        Checkpoint(None)
    for bad in (0, -3):
        with pytest.raises(ValueError, match=f"every_n_batches must be an int >= 1, got {bad!r}"):
            Checkpoint(tmp_path / "c.pt", every_n_batches=bad)
    for bad in (1.5, True, "4"):
        with pytest.raises(TypeError, match=f"every_n_batches must be an int, got {bad!r}"):
            Checkpoint(tmp_path / "c.pt", every_n_batches=bad)
    with pytest.raises(TypeError, match="keep_prev must be a bool \\(True or False\\), got 1"):
        Checkpoint(tmp_path / "c.pt", keep_prev=1)
    with pytest.raises(ValueError, match="never save"):
        Checkpoint(tmp_path / "c.pt", every_n_batches=None, at_epoch_end=False)


def test_keep_prev_false_keeps_one_file(tmp_path):
    learn = build_learner()
    learn.add_cbs(Checkpoint(tmp_path / "only.pt", every_n_batches=10, keep_prev=False))
    learn.fit(1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["only.pt"]
    assert read_checkpoint(tmp_path / "only.pt")["state"]["loop"] == {"epoch": 1, "iter": 0, "n_iter": 45, "n_steps": 45}


class EmaOfInputs(Callback):
    "Keeps tensors from batch to batch without a state_dict: a moving average, and the last inputs in a dict of lists."
    def __init__(self):
        self.ema = None
        self.recent = {"inputs": []}
        self.scale = 1.0

    def on_batch_begin(self):
        x = self.learn.xb.mean(0)
        self.ema = x if self.ema is None else 0.9 * self.ema + 0.1 * x
        self.recent["inputs"] = [self.learn.xb[:1]]


class SavedEma(EmaOfInputs):
    "The same tensors, saved."
    def state_dict(self):
        return {"ema": self.ema}

    def load_state_dict(self, state):
        self.ema = state["ema"]


class Counts(Callback):
    "Numbers, lists and strings only: nothing a checkpoint could miss."
    def __init__(self):
        self.counts = [0, 1]
        self.label = "counts"


def checkpoint_warnings(tmp_path, *cbs) -> list[str]:
    "The RuntimeWarnings of a fit that checkpoints every 10 batches with `cbs` attached."
    learn = build_learner(tmp_path / "w.pt", every=10)
    learn.add_cbs(*cbs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        learn.fit(1)
    return [str(w.message) for w in caught if w.category is RuntimeWarning]


def test_a_callback_holding_tensors_without_state_dict_is_named_when_a_checkpoint_is_written(tmp_path):
    found = checkpoint_warnings(tmp_path, EmaOfInputs(), SavedEma(), Counts())
    assert len(found) == 4  # one per checkpoint: after batches 10, 20, 30 and 40
    assert all("EmaOfInputs (ema, recent)" in message and "state_dict" in message for message in found)
    assert not any("SavedEma" in message or "Counts" in message for message in found)
    assert checkpoint_warnings(tmp_path, SavedEma(), Counts()) == []
    learn = build_learner()
    learn.add_cbs(EmaOfInputs())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_checkpoint(learn, tmp_path / "before-fit.pt")  # no tensor held yet (ema None, an empty list): no warning


def test_the_kits_callbacks_give_no_unsaved_tensor_warning_but_a_users_does(tmp_path):
    "GradientClipping (last_norm), MixUp (shuffle), TerminateOnNaN (_bad) define their state; a user's tensor is named."
    from looplab.learner import Learner
    from looplab.regularize import GradientClipping, MixUp, TerminateOnNaN

    class KeepsTensor(Callback):
        def on_batch_end(self):
            self.last = self.learn.loss

    def saved_warnings(*cbs) -> list[str]:
        learn = Learner(nn.Linear(64, 10), DataLoaders.from_tensors(*load_digits(), bs=256), cbs=list(cbs),
                        progress=False)
        learn.fit(1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            save_checkpoint(learn, tmp_path / "kit.pt")
        return [str(w.message) for w in caught if w.category is RuntimeWarning]

    kit = [GradientClipping(max_norm=1.0), MixUp(), TerminateOnNaN()]
    assert saved_warnings(*kit) == []
    named = saved_warnings(*kit, KeepsTensor())
    assert len(named) == 1 and "KeepsTensor (last)" in named[0] and "GradientClipping" not in named[0]


def test_load_checkpoint_says_where_the_run_resumes(tmp_path):
    learn = build_learner(tmp_path / "c.pt", save_at=[7])
    learn.fit(1)
    resumed = build_learner(tmp_path / "c.pt")
    header = load_checkpoint(resumed, tmp_path / "c.pt-batch7.pt")
    assert header["resumes_at"] == {"epoch": 0, "iter": 7, "n_iter": 7, "n_steps": 7} and header["format_version"] == 1
