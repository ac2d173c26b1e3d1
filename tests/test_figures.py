"""The report's series of figures (telemetry/figures.py): exact medians up to EXACT figures,
within 0.05 % past them, in memory that does not grow with the run's length."""

from __future__ import annotations

import math
import random
import statistics

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as hs

from pardash.telemetry import schema
from pardash.telemetry.figures import EXACT, GAMMA, Figures
from pardash.telemetry.report import build_report

TOLERANCE = (GAMMA - 1) / (GAMMA + 1)


def _close_to_median(got: float, figures: list[float]) -> bool:
    """Within TOLERANCE of the exact median (of the larger of its two middle figures, where the
    count is even: each is read within TOLERANCE of itself)."""
    s = sorted(figures)
    scale = max(abs(s[(len(s) - 1) // 2]), abs(s[len(s) // 2]))
    return abs(got - statistics.median(s)) <= TOLERANCE * scale * (1 + 1e-9)


def _filled(figures: list[float]) -> Figures:
    f = Figures()
    for x in figures:
        f.append(x)
    return f


def test_a_series_up_to_exact_figures_has_its_exact_median_and_total():
    rnd = random.Random(1)
    figures = [rnd.lognormvariate(-4, 0.3) for _ in range(EXACT - 1)]
    f = _filled(figures)
    assert f.median() == statistics.median(figures)
    assert f.total() == sum(figures) and len(f) == EXACT - 1


def test_a_long_series_keeps_a_few_hundred_bins_and_a_median_within_the_tolerance():
    # A day's step times of one rank at 10 steps/s, 17 ms give or take 10 %, a slow step in a
    # hundred: kept one by one, 6.9 MB; binned, fewer than EXACT figures and the bins.
    rnd = random.Random(2)
    figures = [rnd.gauss(0.017, 0.0017) * (5 if rnd.random() < 0.01 else 1) for _ in range(864_000)]
    f = _filled(figures)
    assert len(f) == len(figures) and len(f.values) < EXACT
    # One 4-byte count a bin from the least figure's to the largest's: 11 KB here.
    assert len(f._counts) <= math.log(max(figures) / min(figures)) / math.log(GAMMA) + 2
    assert len(f._counts) * f._counts.itemsize < 16_000, len(f._counts)
    assert _close_to_median(f.median(), figures), (f.median(), statistics.median(figures))
    assert abs(f.total() - sum(figures)) <= 1e-9 * sum(figures)


@settings(max_examples=60, deadline=None)
@given(
    hs.lists(
        # (between LEAST and LARGEST, where the promise holds: a nanosecond to months)
        hs.one_of(hs.floats(min_value=-1e4, max_value=1e4, allow_nan=False).map(lambda x: x if abs(x) >= 1e-9 else 0.0),
                  hs.just(0.0), hs.floats(min_value=1e-6, max_value=1e-3)),
        min_size=1, max_size=300,
    ),  # fmt: skip
    hs.integers(min_value=1, max_value=3),
)
def test_binned_medians_are_within_the_tolerance_whatever_the_figures(figures, times):
    # Past EXACT figures: the same figures several times over, mixed signs, zeros, tiny ones.
    many = figures * (EXACT // len(figures) + times)
    assert len(many) > EXACT
    assert _close_to_median(_filled(many).median(), many)


def test_nan_and_infinities_in_a_hand_made_log_break_nothing():
    f = _filled([0.01] * EXACT + [float("nan"), float("inf"), float("-inf"), 0.02])
    assert len(f) == EXACT + 4 and abs(f.median() - 0.01) <= TOLERANCE * 0.01


def test_the_report_of_a_long_run_gives_its_medians_within_the_tolerance(tmp_path):
    # 2 ranks x 6,000 steps (past EXACT): each rank's median step and phase times within 0.05 %
    # of the exact ones, every step counted, the data-bound totals as before.
    rnd = random.Random(3)
    n, t = 6000, 1000.0
    records: list = [schema.Hello(run="r", rank=r, seq=0, world_size=2, pid=10 + r, strategy="ddp", t=t) for r in (0, 1)]
    times: dict[int, dict[str, list[float]]] = {r: {"step_s": [], "data_s": [], "augment": []} for r in (0, 1)}
    for step in range(1, n + 1):
        t += 0.02
        for r in (0, 1):
            step_s, data_s, aug = rnd.gauss(0.02, 0.002), rnd.uniform(0.001, 0.004), rnd.uniform(0.0005, 0.001)
            for name, x in (("step_s", step_s), ("data_s", data_s), ("augment", aug)):
                times[r][name].append(x)
            records.append(schema.Step(run="r", rank=r, seq=step, step=step, t=t, step_s=step_s, data_s=data_s, samples=8,
                                       loss=1.0 / step, phases={"augment": aug}))  # fmt: skip
    log = tmp_path / "long.jsonl"
    log.write_bytes(b"".join(schema.encode_json(msgspec.structs.replace(m, hseq=i + 1)) + b"\n" for i, m in enumerate(records)))
    rep = build_report(str(log))
    for row in rep["ranks"]:
        mine = times[row["rank"]]
        assert row["steps"] == n
        assert _close_to_median(row["median_step_s"], mine["step_s"]), (row["median_step_s"], statistics.median(mine["step_s"]))
        assert _close_to_median(row["median_data_s"], mine["data_s"])
        assert _close_to_median(row["custom_phases"]["augment"], mine["augment"])
        assert row["median_step_s"] != statistics.median(mine["step_s"])  # (binned, not kept one by one)


def test_figures_far_below_a_nanosecond_or_above_months_share_the_end_bins():
    # A hand-made log's 1e-300 beside real step times stretched the bins over 690,000 (2.7 MB a
    # series); they share the bin of LEAST (LARGEST) now: the median of the rest is as before.
    from pardash.telemetry.figures import LARGEST, LEAST

    figures = [0.02] * (EXACT + 10) + [1e-300, 5e-12, 1e300]
    f = _filled(figures)
    span = math.log(LARGEST / LEAST) / math.log(GAMMA) + 2
    assert len(f._counts) <= span and abs(f.median() - 0.02) <= TOLERANCE * 0.02
