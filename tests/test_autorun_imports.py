"""What autorun imports before the script's own code: with telemetry off (no instrument), no
torch. It imported ``torch.distributed`` up front to wrap ``destroy_process_group`` (see
autorun._settle_before_destroy), 2 s of a core in a rank whose script never imports torch (one
that prints its arguments, a launcher's probe); the wrapper is now put in place as the script
imports ``torch.distributed``, and is there whichever way the script takes it."""

from __future__ import annotations

import subprocess
import sys

from helpers import pardash_env

SCRIPT = """
import sys
print("torch imported before the script:", "torch" in sys.modules)
import torch.distributed as dist
from torch.distributed import destroy_process_group
from torch.distributed.distributed_c10d import destroy_process_group as c10d_destroy
print("wrapped:", [hasattr(f, "__wrapped__") for f in (dist.destroy_process_group, destroy_process_group, c10d_destroy)])
"""


def test_with_telemetry_off_autorun_imports_no_torch_and_still_settles_the_groups_end(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    env = pardash_env(PARDASH_TELEMETRY="0")
    out = subprocess.run([sys.executable, "-m", "pardash.trainer.autorun", str(script)], capture_output=True, text=True,
                         env=env, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["torch imported before the script: False", "wrapped: [True, True, True]"]
