"""Training in real gloo processes on the CPU: notebook 14's claims, each checked in worker processes."""
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import dist_workers as w
from helpers import run, started
from looplab.distributed import WorkerError, free_port, launch
from looplab.engine import DeviceEngine

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(1)


def assert_gone(pids):
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_two_processes_with_half_batches_step_like_one_with_the_whole_batch():
    "(a) DDP averages the ranks' gradients, and the mean of two half-batch means is the whole batch's mean."
    (params, n_steps), (params1, _) = launch(w.ddp_toy_params, nprocs=2, args=(2,))
    single = w.toy_learner(DeviceEngine("cpu"))
    single.fit(2)
    assert n_steps == single.n_steps == 12
    for name, p in single.model.state_dict().items():
        assert torch.equal(params[name], params1[name])  # the ranks agree bit for bit
        assert (params[name] - p).abs().max() <= 1e-6, name
    start = w.toy_learner(DeviceEngine("cpu")).model.state_dict()
    assert any((start[k] - p).abs().max() > 1e-2 for k, p in params.items())  # and training did move them


@pytest.mark.parametrize("nprocs", [2, 3])
def test_validation_accuracy_over_ranks_is_exact_on_an_odd_validation_set(nprocs):
    "(b) 359 validation items dealt over the ranks without padding: the accuracy equals the 1-process value."
    results = launch(w.ddp_digits_validate, nprocs=nprocs)
    counts = [r[2] for r in results]
    assert sum(counts) == 359 and max(counts) - min(counts) == 1
    params, metrics, _ = results[0]
    assert all(r[1] == metrics for r in results)
    single = w.ddp_digits_learner(DeviceEngine("cpu"))
    single.model.load_state_dict(params)
    expected = single.validate()
    assert metrics["accuracy"] == expected["accuracy"]
    assert abs(metrics["valid_loss"] - expected["valid_loss"]) < 1e-6  # float32 batch means, summed in another grouping
    assert 0.5 < metrics["accuracy"] < 1.0


def items(path):
    return [sorted(map(int, line.split())) for line in Path(path).read_text().splitlines()]


@pytest.mark.parametrize("resume_nprocs", [1, 3])
def test_checkpoint_from_two_processes_resumes_in_another_number_with_the_same_items(tmp_path, resume_nprocs):
    "(c) saved by 2 processes in the middle of epoch 1, resumed by 1 or 3: the global sequence of items is unchanged."
    launch(w.resume_run, nprocs=1, args=(tmp_path / "whole.log", tmp_path / "unused.pt"))
    whole = items(tmp_path / "whole.log")
    assert len(whole) == 2 * 9 and sorted(i for b in whole[:9] for i in b) == list(range(100))
    ckpt = tmp_path / "mid.pt"
    launch(w.resume_run, nprocs=2, args=(tmp_path / "first.log", ckpt, 13))
    first = items(tmp_path / "first.log")
    assert len(first) == 13
    n_iter, n_steps = launch(w.resume_run, nprocs=resume_nprocs, args=(tmp_path / "second.log", ckpt, None, True))[0]
    assert first + items(tmp_path / "second.log") == whole  # nothing lost, nothing repeated
    assert (n_iter, n_steps) == (18, 18)
    with pytest.raises(WorkerError, match="EpochBatchSampler state with n=100 into a sampler with n=101"):
        launch(w.resume_run, nprocs=resume_nprocs, args=(tmp_path / "bad.log", ckpt, None, True, 101))


def test_launcher_reports_the_failing_rank_and_leaves_no_process(tmp_path):
    "(e) rank 1 raises while rank 0 waits for it in a barrier: the error names rank 1, and both processes are gone."
    others = set(multiprocessing.active_children())  # children of earlier tests (a persistent DataLoader's workers)
    with pytest.raises(WorkerError) as info:
        launch(w.write_pid_then, nprocs=2, args=(str(tmp_path), "fail"))
    assert info.value.rank == 1 and "KeyError: 'a bug on rank 1'" in str(info.value)
    assert "write_pid_then" in info.value.traceback
    pids = [int(p.read_text()) for p in sorted(tmp_path.glob("*.pid"))]
    assert len(pids) == 2
    assert_gone(pids)
    assert set(multiprocessing.active_children()) <= others  # no worker of this launch is left


def test_launcher_ends_its_workers_on_interrupt(tmp_path):
    "(e) Ctrl-C in the launching process ends the workers too."
    script = ("import sys; sys.path.insert(0, %r); import dist_workers as w; from looplab.distributed import launch; "
              "launch(w.write_pid_then, nprocs=2, args=(%r, 'sleep'))") % (str(Path(__file__).parent), str(tmp_path))
    with started([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)},
                 stderr=subprocess.PIPE) as proc:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("*.pid"))) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "the workers did not start"
            time.sleep(0.05)
        time.sleep(0.2)
        pids = [int(p.read_text()) for p in sorted(tmp_path.glob("*.pid"))]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert b"KeyboardInterrupt" in err
        assert_gone(pids)  # checked before `started` ends whatever is left


def test_launcher_bad_input(tmp_path):
    with pytest.raises(ValueError, match="nprocs must be an int >= 1, got 0"):
        launch(w.engine_checks, nprocs=0)
    with pytest.raises(ValueError, match="module level"):
        launch(lambda: 1, start_method="spawn")
    n_gpus = torch.cuda.device_count()
    with pytest.raises(ValueError, match=f"nprocs={n_gpus + 1}, but this machine has {n_gpus} CUDA device"):
        launch(w.engine_checks, nprocs=n_gpus + 1, backend="nccl")
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(ValueError, match=f"port {busy.getsockname()[1]} on 127.0.0.1 is already in use"):
            launch(w.engine_checks, port=busy.getsockname()[1])


def test_launch_with_spawn_runs_a_module_level_function(tmp_path):
    ranks = launch(w.write_pid_then, nprocs=2, args=(str(tmp_path), "return"), start_method="spawn")
    assert ranks == [0, 1]


@pytest.mark.parametrize("every, expected", [(1, 8), (4, 2)])
def test_accumulation_syncs_gradients_once_per_window(every, expected):
    "(f) 8 batches accumulated in windows of 4: two all-reduces (and two steps), not eight."
    results = launch(w.count_allreduces, nprocs=2, args=(every,))
    assert [(r[0], r[1]) for r in results] == [(expected, expected)] * 2
    assert all(torch.equal(results[0][2][k], results[1][2][k]) for k in results[0][2])  # the ranks stay equal


def test_torchrun_trains_the_example_with_two_processes(tmp_path):
    out = tmp_path / "result.json"
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(ROOT / "examples" / "train_digits.py"), "--epochs", "2",
           "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = run(cmd, timeout=120, env=env)  # torchrun's workers too, if the test is interrupted
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2 and result["valid_items"] == 359
    assert result["accuracy"] > 0.85
    assert done.stdout.count("train_loss") == 1  # one progress table: rank 0's


@pytest.mark.parametrize("nprocs", [1, 2])
def test_ordered_data_with_a_validation_set_under_ddp_equals_one_process_and_resumes(tmp_path, nprocs):
    "from_tensors(shuffle=False, valid=...): every process count sees the items in the order given, trains alike."
    single, single_valid = w.ordered_run(tmp_path / "single.log")  # this process: no DDP
    in_order = [list(range(i, i + 16)) for i in range(0, 80, 16)]
    assert items(tmp_path / "single.log") == 2 * in_order
    (params, valid), *_ = launch(w.ordered_run, nprocs=nprocs, args=(tmp_path / "ddp.log",))
    assert items(tmp_path / "ddp.log") == 2 * in_order  # each global batch, shard by shard, in the order given
    for name, p in single.items():
        assert (params[name] - p).abs().max() <= 1e-6, name
    assert all(abs(a - b) <= 1e-6 for a, b in zip(valid, single_valid))  # the explicit validation set, over ranks
    ckpt = tmp_path / "mid.pt"
    launch(w.ordered_run, nprocs=nprocs, args=(tmp_path / "first.log", ckpt, 7))  # stopped in epoch 1
    (resumed, _), *_ = launch(w.ordered_run, nprocs=3 - nprocs, args=(tmp_path / "second.log", ckpt, None, True))
    assert items(tmp_path / "first.log") + items(tmp_path / "second.log") == 2 * in_order
    for name, p in single.items():
        assert (resumed[name] - p).abs().max() <= 1e-6, name
