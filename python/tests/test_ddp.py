"""The data-parallel example (python/examples/ddp_train.py): two ranks under
DistributedDataParallel (gloo on the CPU; NCCL on two GPUs where CUDA has
them) give the losses and final weights of one process on the whole batch,
within float32 rounding of the sums' order."""
import json
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "ddp_train.py")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(os.path.dirname(__file__), "..") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _run(tmp_path, device, ranks):
    out = tmp_path / f"{device}-{ranks}.json"
    cmd = [sys.executable, EXAMPLE] if ranks == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", EXAMPLE]
    r = subprocess.run(cmd + ["--device", device, "--json", str(out)], env=_env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_two_ranks_match_one_process(tmp_path, device):
    if device == "cuda" and torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    if shutil.which("torchrun") is None and device == "cuda":
        pytest.skip("no torchrun")
    one, two = _run(tmp_path, device, 1), _run(tmp_path, device, 2)
    assert two["world"] == 2 and one["world"] == 1
    for a, b in zip(one["losses"], two["losses"]):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (one["losses"], two["losses"])
    for k, w1 in one["weights"].items():
        w2 = torch.tensor(two["weights"][k])
        w1 = torch.tensor(w1)
        assert torch.allclose(w1, w2, rtol=1e-5, atol=1e-6), k
