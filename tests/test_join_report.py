"""The report of a job whose rank ran out of inputs under DDP's Join: its last step is no rank
behind ("400 on the slowest rank, 800 on the furthest", review 335), said as the launch's last
line says it."""

from pardash.telemetry import schema
from pardash.telemetry.report import build_report
from pardash.telemetry.report_render import render_text

T = 1_800_000_000.0


def _log(tmp_path, *, join: bool, total: int | None = 40):
    records: list = [schema.Hello(run="r", rank=r, seq=0, world_size=2, strategy="ddp", t=T, source="auto", pardash_version="0.1.0",
                                  config={"total_steps": total} if total else {}) for r in (0, 1)]  # fmt: skip
    t = T
    for s in range(1, 41):
        t += 0.02
        for r in (0, 1):
            if r == 0 and s > 20:
                continue
            records.append(schema.Step(run="r", rank=r, seq=s, step=s, samples=8, t=t, loss=1.0, step_s=0.02, self_s=0.01, comm_s=0.005))
        if s == 20 and join:
            records.append(schema.Event(run="r", rank=0, seq=100, name="join", step=20, t=t,
                                        message="rank 0 ran out of inputs at step 20 and joined: it shadows the others' collectives until they finish"))  # fmt: skip
    for r in (0, 1):
        records.append(schema.Event(run="r", rank=r, seq=200, name="exit", code=0, step=20 if r == 0 else 40, t=t + 0.1))
    path = tmp_path / f"run{join}.jsonl"
    path.write_bytes(schema.encode_json_lines(records))
    return build_report(str(path))


def _steps_line(rep) -> str:
    return next(line for line in render_text(rep).splitlines() if line.startswith("steps "))


def test_a_rank_that_joined_is_said_so_not_the_slowest(tmp_path):
    rep = _log(tmp_path, join=True)
    assert rep["joined"] == [{"rank": 0, "step": 20}]
    assert _steps_line(rep).split(None, 1)[1] == "40 (last step 40; rank 0 ran out of inputs at step 20 and joined)"


def test_without_its_join_event_a_rank_behind_is_the_slowest(tmp_path):
    rep = _log(tmp_path, join=False)
    assert "joined" not in rep
    assert _steps_line(rep).split(None, 1)[1] == "40 (last step 20 on the slowest rank, 40 on the furthest of 40 planned)"
