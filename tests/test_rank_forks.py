"""The tests' ranks forked from a warm process (tests/scripts/rank_zygote.py): the shim torchrun
runs for a rank stands in for it as a rank's own interpreter would: its output, its exit code,
its death by a signal, a signal torchrun sends it, its end when torchrun kills the shim; and a
rank whose environment an interpreter reads differently runs in an interpreter of its own."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from helpers import pardash_env, wait_for

pytestmark = pytest.mark.skipif("PARDASH_TEST_ZYGOTE" not in os.environ, reason="PARDASH_TEST_FORK_RANKS=0: no rank is forked")

RANK = """
import os, signal, sys, time
print("parent", *open(f"/proc/{os.getppid()}/cmdline").read().split(chr(0))[1:3], sys.argv[1:], os.getcwd(), flush=True)
print("session leader", os.getsid(0) == os.getpid(), "env", os.environ.get("RANK_FORKS_PROBE"), flush=True)
if sys.argv[1] == "exit":
    sys.exit(int(sys.argv[2]))
if sys.argv[1] == "raise":
    raise ValueError("boom")
signal.signal(signal.SIGTERM, lambda *_: (print("took SIGTERM", flush=True), sys.exit(7)))
open(sys.argv[2], "w").write(str(os.getpid()))
time.sleep(120)
"""


@pytest.fixture
def rank(tmp_path):
    (tmp_path / "forked_rank.py").write_text(RANK)

    def start(*args: str, **env: str | None) -> subprocess.Popen:
        return subprocess.Popen([os.environ["PYTHON_EXEC"], "-u", "-m", "forked_rank", *args], cwd=tmp_path, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=pardash_env(RANK_FORKS_PROBE="1", **env),
                                start_new_session=True)  # fmt: skip (a session of its own, as torchrun starts a rank)

    return start


def test_a_forked_rank_has_its_arguments_output_and_exit_code(rank, tmp_path):
    out, err = (p := rank("exit", "3")).communicate(timeout=60)
    assert p.returncode == 3, err
    zygote = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "rank_zygote.py")
    assert out.splitlines() == [f"parent -u {zygote} ['exit', '3'] {tmp_path}", "session leader True env 1"]
    out, err = (p := rank("raise", "-")).communicate(timeout=60)
    # (its traceback as python -m prints it, but for one frame at its top: the server's)
    assert p.returncode == 1 and err.rstrip().endswith("ValueError: boom"), err


def test_a_signal_to_the_shim_reaches_the_rank_and_its_death_by_one_is_the_shims(rank, tmp_path):
    pid_file = tmp_path / "pid"
    p = rank("wait", str(pid_file))
    wait_for(lambda: pid_file.exists() and pid_file.read_text())
    os.killpg(p.pid, signal.SIGTERM)  # (as torchrun stops a rank)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 7 and "took SIGTERM" in out
    pid_file.unlink()
    p = rank("wait", str(pid_file))
    wait_for(lambda: pid_file.exists() and pid_file.read_text())
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL


def test_a_shim_killed_takes_its_rank_with_it(rank, tmp_path):
    pid_file = tmp_path / "pid"
    p = rank("wait", str(pid_file))
    wait_for(lambda: pid_file.exists() and pid_file.read_text())
    forked = int(pid_file.read_text())
    p.kill()
    p.communicate(timeout=60)

    def gone() -> bool:
        try:
            with open(f"/proc/{forked}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    wait_for(gone)


def test_a_rank_whose_interpreter_reads_its_environment_otherwise_is_not_forked(rank):
    out, err = (p := rank("exit", "0", PYTHONHASHSEED="7")).communicate(timeout=60)
    assert p.returncode == 0, err
    assert "rank_zygote" not in out.splitlines()[0], out
