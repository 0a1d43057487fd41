"""State carried across batches: a small LSTM language model killed at a random batch (SIGKILL) and resumed in a new
process ends bit-identical to the uninterrupted run; without the state in the checkpoint it differs, and the
checkpoint warns; the port of pytorch/examples' word_language_model equals the plain torch loop."""
import os
import random
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from looplab.callback import Callback
from looplab.checkpoint import load_checkpoint, read_checkpoint
from looplab.stateful import CarryState
from helpers import SaveAt, run_worker
from lm_worker import build_learner, results

WORKER = Path(__file__).resolve().parent / "lm_worker.py"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIMEOUT = 300


pytestmark = pytest.mark.usefixtures("one_thread")  # the fixture is conftest's


def kill_after(cmd: list[str], n_iter: int) -> None:
    "Start `cmd`, wait until it has trained batch `n_iter`, and SIGKILL it."
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.strip().isdigit() and int(line) >= n_iter:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=TIMEOUT)
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, f"the process ended before the kill:\n{proc.stderr.read()}"
    proc.stderr.close()


def assert_same_run(result: dict, reference: dict, label: str) -> None:
    assert all(torch.equal(p, q) for p, q in zip(result["params"], reference["params"])), f"{label}: parameters differ"
    assert torch.equal(result["losses"], reference["losses"]), f"{label}: batch losses differ"
    for key, values in reference["values"].items():
        assert torch.equal(result["values"][key], values), f"{label}: {key} per epoch differs"


def test_killed_at_a_random_batch_and_resumed_in_a_new_process_is_bit_identical(tmp_path):
    reference = run_worker(WORKER, tmp_path / "reference.pt")
    n_batches = reference["n_iter"]
    assert n_batches == len(reference["losses"]) > 40
    kill_at = random.Random(21).randrange(5, n_batches - 15)
    ckpt = tmp_path / "ckpt.pt"
    out = tmp_path / "resumed.pt"
    cmd = [sys.executable, str(WORKER), str(out), "--ckpt", str(ckpt), "--every", "3"]
    kill_after(cmd, kill_at)
    assert not out.exists()
    saved = read_checkpoint(ckpt)["state"]
    h, c = saved["callbacks"]["carry_state"]["state"]  # the LSTM's state after the last saved batch, carried on
    assert h.shape == c.shape == (2, 8, 24) and h.abs().sum() > 0
    resumed = run_worker(WORKER, out, "--ckpt", ckpt, "--every", 3)
    assert resumed["resumed_from"]["n_iter"] == saved["loop"]["n_iter"] >= kill_at - 2
    assert_same_run(resumed, reference, f"killed after batch {kill_at}, resumed from {saved['loop']['n_iter']}")


class CarryUnsaved(CarryState):
    "CarryState whose state is not saved: the state_dict of the base Callback."
    state_dict = Callback.state_dict
    load_state_dict = Callback.load_state_dict


def resumed_run(tmp_path, carry, n: int):
    "A run stopped after batch `n` with a checkpoint, resumed in a new learner; the checkpoint's warnings."
    path = tmp_path / f"{carry.__name__}.pt"
    first = build_learner(carry=carry)
    first.add_cbs(SaveAt(path, n_iter=n))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first.fit(2)
    resumed = build_learner(carry=carry)
    resumed.add_cbs(SaveAt())
    load_checkpoint(resumed, path)
    resumed.fit(2)
    return resumed, [str(w.message) for w in caught if w.category is RuntimeWarning]


def test_without_the_state_in_the_checkpoint_the_resumed_run_differs_and_saving_warns(tmp_path):
    whole = build_learner()
    whole.add_cbs(SaveAt())
    whole.fit(2)
    reference = results(whole, {})
    kept, kept_warnings = resumed_run(tmp_path, CarryState, 10)
    assert_same_run(results(kept, {}), reference, "state saved")
    assert kept_warnings == []
    lost, lost_warnings = resumed_run(tmp_path, CarryUnsaved, 10)
    drift = max((p - q).abs().max().item() for p, q in zip(results(lost, {})["params"], reference["params"]))
    assert drift > 1e-4, "forgetting the carried state should change the resumed run"
    assert len(lost_warnings) == 1 and "CarryUnsaved (state)" in lost_warnings[0]


def word_language_model_scripts():
    "examples/word_language_model.py (the port) and word_language_model_plain.py, as modules."
    sys.path.insert(0, str(EXAMPLES))
    try:
        import word_language_model as port
        import word_language_model_plain as plain
    finally:
        sys.path.remove(str(EXAMPLES))
    return port, plain


def test_the_port_of_word_language_model_equals_plain_torch():
    "Same seed, same ops in the same order: bit-identical weights; the test perplexity to float64 rounding."
    port, plain = word_language_model_scripts()
    mine = port.main(["--quick"], verbose=False)
    theirs = plain.main(["--quick"], verbose=False)
    assert all(torch.equal(p, q) for p, q in zip(mine["params"], theirs["params"]))
    # the validation mean is summed in another order (the Recorder's float64 tensor; the original's Python floats)
    assert mine["test_ppl"] == pytest.approx(theirs["test_ppl"], rel=1e-12)


def test_bptt_batches_warns_on_a_stream_laid_out_the_other_way():
    "batchify(..., batch_first=False) read batch-first: the bs columns taken for positions, one window an epoch."
    from looplab.stateful import BPTTBatches, batchify

    stream = torch.arange(2900 * 19)
    with pytest.warns(UserWarning, match=r"bptt=35 is not shorter than the stream.*batch_first=False"):
        wrong = BPTTBatches(batchify(stream, 19, batch_first=False), 35)
    assert len(wrong) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(BPTTBatches(batchify(stream, 19, batch_first=False), 35, batch_first=False)) == 83


def test_the_port_anneals_the_lr_as_the_original_does():
    "A run whose validation loss rises once: TorchScheduler(ReduceLROnPlateau) divides the LR by 4 where main.py does."
    port, plain = word_language_model_scripts()
    argv = ["--epochs", "3", "--sentences", "600", "--lr", "40"]  # epoch 2's validation loss is worse than epoch 1's
    mine = port.main(argv, verbose=False)
    theirs = plain.main(argv, verbose=False)
    assert all(torch.equal(p, q) for p, q in zip(mine["params"], theirs["params"]))
