"examples/dcgan.py (looplab, DCGAN mode) against examples/dcgan_plain.py (plain torch): the same run, step for step."
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import dcgan  # noqa: E402  (from examples/, put on the path above)
import dcgan_plain  # noqa: E402


def max_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    "The largest absolute difference between the parameters and buffers of two copies of one network."
    pairs = zip(a.state_dict().values(), b.state_dict().values())  # parameters and batch-norm statistics
    return max(float((x.double() - y.double()).abs().max()) for x, y in pairs)


@pytest.mark.parametrize("epochs", [1, 3])
def test_the_port_is_bit_identical_to_plain_torch_at_equal_optimizer_steps(epochs):
    torch.set_num_threads(1)
    learn = dcgan.train(epochs, n_images=256, seed=3, verbose=False)  # 4 batches an epoch: 4 steps of each network
    netG, netD = dcgan_plain.train(epochs, n_images=256, seed=3, verbose=False)
    assert learn.n_steps == 4 * epochs  # the generator's steps; the critic took as many
    diff_g = max_diff(learn.model.generator, netG)
    diff_d = max_diff(learn.model.critic, netD)
    assert diff_g == 0 and diff_d == 0, (diff_g, diff_d)  # weights and batch-norm statistics, bit for bit
    print(f"after {4 * epochs} steps of each network: max |dw| generator {diff_g:.2e}, critic {diff_d:.2e}")


@pytest.mark.parametrize("script", ["dcgan.py", "dcgan_plain.py"])
def test_each_script_runs_from_the_command_line_in_seconds(script):
    done = subprocess.run([sys.executable, str(EXAMPLES / script), "--epochs", "1"], capture_output=True, text=True,
                          timeout=120, cwd=EXAMPLES)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("D(G(z))" in done.stdout) and ("crit_loss" in done.stdout or "Loss_D" in done.stdout)
