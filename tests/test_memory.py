"""Memory accounting: FSDP2 ranks hold half of what DDP ranks hold, measured on 2 real gloo
ranks of the bundled trainer (AdamW) as their steps report it; plus the ZeRO arithmetic and the torch-free import of the module."""

from __future__ import annotations

import re
import subprocess
import sys

import msgspec
import pytest

from pardash.telemetry import schema
from pardash.telemetry.memory import expected_bytes_per_rank

pytestmark = pytest.mark.xdist_group("shared_run")  # one worker makes the shared launches


def accounts(run) -> list[dict]:
    """Each rank's memory account after its last step (DDP has built its buckets by then),
    with its parameter count and the ZeRO expectation, by rank."""
    out = []
    for r in (0, 1):
        hello = next(m for m in run.messages if isinstance(m, schema.Hello) and m.rank == r)
        last = [m for m in run.messages if isinstance(m, schema.Step) and m.rank == r][-1]
        out.append({
            "rank": r,
            "params_count": hello.params_count,
            "expected_bytes": expected_bytes_per_rank(hello.params_count, 2, run.strategy),
            "mem": msgspec.to_builtins(last.mem),
        })
    return out


@pytest.fixture(scope="module")
def ddp_fsdp(shared_run) -> tuple[list[dict], list[dict]]:
    """The accounts of the session's shared 2-rank DDP and FSDP2 launches (conftest.py)."""
    return accounts(shared_run("ddp")), accounts(shared_run("fsdp"))


@pytest.mark.slow
def test_ddp_ranks_hold_the_full_model(ddp_fsdp):
    ddp, _ = ddp_fsdp
    for r in ddp:
        m = r["mem"]
        assert m["params_bytes"] == m["params_full_bytes"] == r["params_count"] * 4
        assert m["grads_bytes"] == m["grads_full_bytes"] == m["params_full_bytes"]
        # AdamW: exp_avg + exp_avg_sq (8 bytes a parameter) and a 4-byte step per tensor.
        assert m["optim_bytes"] == m["optim_full_bytes"]
        assert 2 * m["params_full_bytes"] <= m["optim_bytes"] < 2 * m["params_full_bytes"] + 4096
        # One flat bucket buffer per bucket, as large as the gradients it reduces.
        assert m["buckets_bytes"] == m["grads_bytes"]
        assert m["rss_bytes"] > m["params_bytes"]


@pytest.mark.slow
def test_fsdp_ranks_hold_half_of_the_model(ddp_fsdp):
    ddp, fsdp = ddp_fsdp
    full = ddp[0]["mem"]
    for r in fsdp:
        m = r["mem"]
        # Unsharded equivalents agree with what DDP holds.
        assert m["params_full_bytes"] == full["params_full_bytes"]
        assert m["grads_full_bytes"] == full["grads_full_bytes"]
        assert m["optim_full_bytes"] == full["optim_full_bytes"]
        # Locally: half, up to the padding of dims that do not split evenly (and the
        # replicated 4-byte Adam step counters).
        for kind in ("params", "grads", "optim"):
            assert m[f"{kind}_bytes"] == pytest.approx(m[f"{kind}_full_bytes"] / 2, rel=0.02), kind
        assert m.get("buckets_bytes", 0) == 0
    # Measured against the ZeRO arithmetic: 16 bytes a parameter, over 2 ranks.
    for ddp_r, fsdp_r in zip(ddp, fsdp):
        held = lambda m: m["params_bytes"] + m["grads_bytes"] + m["optim_bytes"]  # noqa: E731
        assert held(ddp_r["mem"]) == pytest.approx(ddp_r["expected_bytes"], rel=0.02)
        assert held(fsdp_r["mem"]) == pytest.approx(fsdp_r["expected_bytes"], rel=0.02)


@pytest.mark.parametrize(
    ("count", "world", "strategy", "expected"),
    [
        (1000, 1, "single", 16000),
        (1000, 4, "ddp", 16000),
        (1000, 8, "dp", 16000),
        (1000, 4, "fsdp", 4000),
        (1001, 4, "fsdp", 4004),
        (1000, 3, "fsdp", 5334),  # rounded up
    ],
)
def test_expected_bytes_follow_zero_arithmetic(count, world, strategy, expected):
    assert expected_bytes_per_rank(count, world, strategy) == expected


def test_account_counts_tied_weights_once_and_reads_state_growth():
    import torch

    from pardash.telemetry.memory import MemoryAccountant
    from pardash.trainer.config import TrainConfig
    from pardash.trainer.models import build_model, count_params

    model = build_model(TrainConfig(strategy="single"))
    count, nbytes = count_params(model)
    opt = torch.optim.AdamW(model.parameters())
    acct = MemoryAccountant(model)
    before = acct.measure([opt])  # no step yet: no gradients, no optimizer state
    assert before.params_bytes == before.params_full_bytes == nbytes == count * 4
    assert before.grads_bytes == before.optim_bytes == 0
    model(torch.randint(0, 64, (2, 32)), torch.randint(0, 64, (2, 32))).backward()
    opt.step()
    after = acct.measure([opt])  # the optimizer's state appeared: recounted at once
    assert after.grads_bytes == nbytes
    assert after.optim_bytes >= 2 * nbytes


def test_zero_stage_1_state_counts_its_shard_held_and_the_whole_unsharded():
    # ZeroRedundancyOptimizer keeps this rank's shard of the state in an inner optimizer, over
    # the parameters this rank owns; the report said "saving 0%" next to a 25% smaller state.
    import torch

    from pardash.telemetry.memory import MemoryAccountant

    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32))
    params = list(model.parameters())
    owned = params[:2]  # this rank's half: the first layer

    class Zero:  # ZeroRedundancyOptimizer's shape, without a process group
        _partition_parameters = True

        def __init__(self) -> None:
            self.optim = torch.optim.AdamW(owned)
            self.param_groups = [{"params": params}]
            self.state: dict = {}

    zero = Zero()
    model(torch.randn(4, 32)).sum().backward()
    zero.optim.step()
    adam = 2 * 4  # exp_avg and exp_avg_sq, fp32 (and a scalar step per parameter)
    for optimizers in ([zero], [zero.optim, zero]):  # the hooks see the inner one step too
        mem = MemoryAccountant(model, full_every=1).measure(optimizers)
        assert mem.optim_bytes == pytest.approx(adam * sum(p.numel() for p in owned), rel=0.01)
        assert mem.optim_full_bytes == pytest.approx(adam * sum(p.numel() for p in params), rel=0.01)


def test_a_sparse_gradient_counts_its_indices_and_values():
    # nn.Embedding(sparse=True): a sparse gradient has no storage of its own, and asking for it
    # raised: every step went out without memory, its peak RSS too, with no word of why.
    import torch

    from pardash.telemetry.memory import MemoryAccountant

    emb, head = torch.nn.Embedding(1000, 16, sparse=True), torch.nn.Linear(16, 2)
    model = torch.nn.Sequential(emb, head)
    opts = [torch.optim.SparseAdam(emb.parameters()), torch.optim.Adam(head.parameters())]
    ids = torch.tensor([3, 3, 7, 9])
    torch.nn.functional.cross_entropy(model(ids), ids % 2).backward()
    for opt in opts:
        opt.step()
    g = emb.weight.grad
    assert g.is_sparse
    sparse = g._indices().nbytes + g._values().nbytes  # 4 rows looked up: 4 indices, 4 x 16 values
    dense_head = (16 * 2 + 2) * 4
    mem = MemoryAccountant(model, full_every=1).measure(opts)
    assert mem.params_bytes == mem.params_full_bytes == (1000 * 16) * 4 + dense_head
    assert mem.grads_bytes == mem.grads_full_bytes == sparse + dense_head
    assert mem.optim_bytes >= 2 * (1000 * 16) * 4 and mem.rss_bytes


def test_gradients_no_longer_held_are_counted_gone_at_the_next_measure():
    # A branch used in the first steps only (DDP's find_unused_parameters, an expert no token
    # reaches, layers frozen as it trains): its gradients set to None, and the count of them
    # went on for up to 50 measures, "held" and "unsharded" 2 MiB over the truth.
    import torch

    from pardash.telemetry.memory import MemoryAccountant

    trunk, branch = torch.nn.Linear(8, 8), torch.nn.Linear(8, 256)
    model = torch.nn.ModuleList([trunk, branch])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acct = MemoryAccountant(model)  # (recounting every 50 measures, as each rank does)
    grads = []
    for step in range(4):
        x = trunk(torch.randn(2, 8))
        (x.sum() + (branch(x).sum() if step < 2 else 0)).backward()
        opt.step()
        grads.append(acct.measure([opt]).grads_bytes)
        opt.zero_grad()  # (set_to_none: the branch's gradients gone from step 2 on)
    both, alone = sum(p.numel() * 4 for p in model.parameters()), (8 * 8 + 8) * 4
    assert grads == [both, both, alone, alone]


def test_parameters_an_optimizer_trains_outside_the_model_or_added_later_are_counted():
    # Review 299: a free-standing nn.Parameter in the optimizer (a soft prompt, a learnt loss
    # weight), and layers added to the model as it trains with a param group of their own:
    # their optimizer state was counted, their params and grads not ("params 2.0 MiB grads
    # 2.0 MiB optim 12.0 MiB").
    import torch

    from pardash.telemetry.memory import MemoryAccountant

    model = torch.nn.Sequential(torch.nn.Linear(16, 32))
    prompt = torch.nn.Parameter(torch.zeros(64, 16))
    opt = torch.optim.Adam([*model.parameters(), prompt])
    acct = MemoryAccountant(model)  # (recounting every 50 measures, as each rank does)

    def step() -> object:
        (model(torch.randn(2, 16) + prompt.sum()).sum()).backward()
        opt.step()
        mem = acct.measure([opt])
        opt.zero_grad()
        return mem

    size = lambda ps: sum(p.numel() * 4 for p in ps)  # noqa: E731
    mem = step()
    want = size(model.parameters()) + size([prompt])
    assert (mem.params_bytes, mem.grads_bytes, mem.params_full_bytes) == (want, want, want)
    model.append(torch.nn.Linear(32, 128))
    opt.add_param_group({"params": list(model[1].parameters())})
    mem = step()
    want += size(model[1].parameters())
    assert (mem.params_bytes, mem.grads_bytes, mem.params_full_bytes, mem.grads_full_bytes) == (want, want, want, want)
    assert mem.optim_bytes == 2 * want + 5 * 4  # Adam's two moments, and its five parameters' step counts


def test_memory_module_does_not_import_torch():
    code = (
        "import sys, pardash.telemetry.memory as m;"
        "assert 'torch' not in sys.modules, 'torch was imported';"
        "print(m.expected_bytes_per_rank(10, 2, 'fsdp'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "80"


def test_rss_is_read_at_every_step_not_only_at_a_full_count():
    # The step's RSS was the one of the last full count, up to 50 steps old: a rank whose memory
    # grew 400 MiB in 40 steps read flat, and the report's peak with it.
    import torch

    from pardash.telemetry.memory import MemoryAccountant

    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters())
    acct = MemoryAccountant(model)  # a full count every 50 calls
    before = acct.measure([opt]).rss_bytes
    grown = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB, every page written
    after = acct.measure([opt]).rss_bytes
    assert after - before >= 48 << 20
    del grown


def _ddp(gradient_as_bucket_view: bool, unused: bool = False):
    import torch

    from pardash.telemetry.memory import MemoryAccountant

    class Heads(torch.nn.Module):  # with ``unused``, a head no step calls
        def __init__(self) -> None:
            super().__init__()
            self.trunk, self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4), torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.a(self.trunk(x)) if unused else self.b(self.a(self.trunk(x)).repeat(1, 4))

    model = Heads()
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, gradient_as_bucket_view=gradient_as_bucket_view, find_unused_parameters=unused
    )
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for _ in range(2):
        ddp(torch.randn(4, 16)).sum().backward()
        opt.step()
    return MemoryAccountant(model, ddp_module=ddp, full_every=1).measure([opt]), sum(p.numel() * 4 for p in model.parameters())


def test_ddp_buckets_count_once_when_the_gradients_are_views_of_them(tmp_path):
    # With gradient_as_bucket_view=True the gradients live in the buckets: counted twice, a rank
    # read 25% more than it held.
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        copied, nbytes = _ddp(False)
        viewed, _ = _ddp(True)
        viewed_unused, _ = _ddp(True, unused=True)
    finally:
        dist.destroy_process_group()
    assert copied.grads_bytes == copied.buckets_bytes == nbytes
    assert viewed.grads_bytes == nbytes and viewed.buckets_bytes == 0
    # A head unused in the step has no gradient, but its room in the bucket is held: held and
    # unsharded the same (a replicated run read "1.07x what ddp should", a -7% saving).
    assert viewed_unused.grads_bytes == viewed_unused.grads_full_bytes == nbytes


@pytest.fixture(scope="module")
def fsdp_memory(tmp_path_factory) -> dict[int, dict]:
    """tests/scripts/fsdp_memory.py run once on 2 gloo ranks under torchrun: the JSON object
    each rank printed, by rank."""
    import json
    import os

    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         os.path.join(os.path.dirname(__file__), "scripts", "fsdp_memory.py")],
        capture_output=True, text=True, timeout=240, cwd=tmp_path_factory.mktemp("fsdp-memory"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    # (Two processes share the pipe: their lines may run together; an object holds objects.)
    ranks = {d["rank"]: d for d in map(json.loads, re.findall(r'\{"rank".*?\}\}\}', out.stdout))}
    assert set(ranks) == {0, 1}, out.stdout
    return ranks


@pytest.mark.slow
def test_a_rank_with_an_empty_shard_counts_the_whole_state_unsharded(fsdp_memory):
    # A parameter with fewer rows than ranks leaves rank 1 no shard of it: its Adam state went
    # missing from rank 1's unsharded figure (41,252 against rank 0's 41,260).
    params = (13 * 37 + 37 + 1) * 4
    for d in fsdp_memory.values():
        d = d["uneven"]
        assert d["params_full"] == d["grads_full"] == params
        assert d["optim_full"] == 2 * params + 3 * 4  # exp_avg, exp_avg_sq and a 4-byte step per tensor
        assert d["shards"] == 2  # split over both ranks


@pytest.mark.slow
def test_fsdp1s_flat_parameters_count_the_whole_model_unsharded(fsdp_memory):
    # FSDP1's parameters (its flat parameter, or with use_orig_params the original ones, views
    # of this rank's shard) have their shard's numel: unsharded, the model read as half of
    # itself, "saving 0%", and every rank was told to wrap its blocks.
    n = 13 * 37 + 37 + 1
    for rank, d in fsdp_memory.items():
        for how in ("flat", "orig"):
            one = d["fsdp1"][how]
            assert one["count"] == n, (rank, how, one)
            assert one["params_full"] == one["grads_full"] == 4 * n, (rank, how, one)
            assert one["optim_full"] == 2 * 4 * n + 4 * one["steps"], (rank, how, one)  # exp_avg, exp_avg_sq, the steps
            assert 4 * n / 2 <= one["params"] <= 4 * n * 0.55, (rank, how, one)  # its shard (padded, aligned)
            assert one["shards"] == 2, (rank, how, one)


@pytest.mark.slow
def test_fsdp1s_frozen_parameters_have_no_gradients_or_optimizer_state_unsharded(fsdp_memory):
    # (review 223) LoRA under FSDP1 (use_orig_params): a frozen base and a trained adapter in
    # one flat parameter. The rank holding the adapter counted Adam's state for the whole flat
    # parameter unsharded (84,004 B of 3,204). Rank 0's shard is of the frozen base alone: it
    # holds no gradient or state to count, and says none.
    adapter = 400 * 4
    lora = {rank: d["fsdp1"]["lora"] for rank, d in fsdp_memory.items()}
    assert lora[0]["grads_full"] == lora[0]["optim_full"] == 0, lora
    assert lora[1]["optim_full"] == 2 * adapter + 4, lora  # exp_avg, exp_avg_sq, a step
    # (its gradient: FSDP1 allocates its shard's whole, of 10,500 / 2 elements, the frozen
    # base's part too; held, and so no less unsharded)
    assert lora[1]["grads_full"] == 10_500 // 2 * 4, lora
    assert all(one["params_full"] == (100 * 100 + 100) * 4 + adapter and one["shards"] == 2 for one in lora.values())
    # NO_SHARD: every rank holds the whole model, sharded over no other rank
    for d in fsdp_memory.values():
        one = d["fsdp1"]["noshard"]
        assert one["params"] == one["params_full"] == (100 * 100 + 100) * 4 + adapter and one["shards"] == 1, one


@pytest.mark.slow
def test_an_hsdp_rank_says_it_is_sharded_over_its_shard_group_not_the_world(fsdp_memory):
    # FSDP2 on a (replicate 2, shard 1) mesh: each rank holds the whole model, as it should;
    # judged against 1/world, every rank was told "2.0x its 1/2 share: is every block wrapped?"
    n = 13 * 37 + 37 + 1
    for d in fsdp_memory.values():
        assert d["hsdp"] == {"params": 4 * n, "params_full": 4 * n, "shards": 1}


@pytest.mark.slow
def test_a_tensor_parallel_model_reads_as_tp_sharded_over_its_mesh(fsdp_memory):
    # parallelize_module leaves no wrapper: the run read "single", expected a full copy of its
    # state on each rank ("0.50x"), and its grid's self column was empty (no straggler signal).
    full = (16 * 64 + 64 + 64 * 16 + 16) * 4
    for rank, d in fsdp_memory.items():
        tp = d["tp"]["tp"]
        assert tp["strategy"] == "tp", tp
        assert tp["params_count"] * 4 == tp["params_full"] == full  # the hello and the memory, unsharded
        assert tp["shards"] == 2 and tp["params"] == (16 * 32 + 32 + 32 * 16 + 16) * 4  # (the down bias is whole on each)
        # Self time up to the forward, where the layers' collectives make the ranks wait (the
        # first step's clock starts at its forward: 0).
        assert all(x is not None for x in tp["self"]), tp["self"]
        # FSDP over it (2-D) reads as fsdp; its self time too ends as its forward begins: its
        # data (the forward's waits are the TP layers' as well as FSDP's all-gathers, and
        # "the forward less its all-gathers" held them: a data straggler's peers read as slow).
        two = d["tp"]["2d"]
        assert two["strategy"] == "fsdp" and two["params_full"] == full, two
        assert two["self"] == pytest.approx(two["data"], abs=1e-9), two


def test_a_tensor_parallel_run_is_judged_as_sharded(tmp_path):
    # A run whose ranks hold half their state each is what tp x2 should be; one holding all of
    # it (a plan that split none of its layers) is asked about the plan, not about fully_shard.
    from pardash.telemetry.recorder import Recorder
    from pardash.telemetry.report import build_report, render_text

    core, step = _sharding_run({0: 40_000, 1: 40_000}, full=80_000, strategy="tp")
    assert step(1, {0: 40_000, 1: 40_000}) == []
    said = step(2, {0: 80_000, 1: 40_000})
    assert [(v.rank, v.verdict) for v in said] == [(0, "not_sharding")]
    assert "parallelize_module" in said[0].message and "fully_shard" not in said[0].message
    from pardash.telemetry.hubcore import HubCore

    path = tmp_path / "run.jsonl"
    core = HubCore(run_id="r", recorder=Recorder(path))
    for rank in range(2):
        core.ingest(schema.Hello(rank=rank, world_size=2, strategy="tp", run="r", t=1.0), 1.0)
        mem = schema.Mem(params_bytes=10_000, grads_bytes=10_000, optim_bytes=20_000,
                         params_full_bytes=20_000, grads_full_bytes=20_000, optim_full_bytes=40_000, shards=2)  # fmt: skip
        core.ingest(schema.Step(rank=rank, step=1, seq=1, t=2.0, step_s=0.1, mem=mem, run="r"), 2.0)
    core.recorder.close()
    rep = build_report(str(path))
    assert rep["memory"]["expected_bytes_per_rank"] == 40_000 and rep["memory"]["expected_basis"] == "its state unsharded ÷ 2"
    assert "ranks hold 1.00x what tp x2 should" in render_text(rep)


@pytest.mark.parametrize("shards", [1, 2])
def test_a_sharded_run_is_judged_against_the_ranks_it_is_sharded_over(tmp_path, shards):
    # 4 ranks, HSDP over 2 nodes of 2 (shards 2) or FSDP2's replicate() (shards 1): each rank
    # holds its 1/shards of the state, which read "2.0x its 1/4 share" (or 4.0x) on every rank.
    from pardash.telemetry.recorder import Recorder
    from pardash.telemetry.report import build_report, render_text
    from pardash.telemetry.hubcore import HubCore

    full = 80_000
    path = tmp_path / "run.jsonl"
    core = HubCore(run_id="r", recorder=Recorder(path))
    for rank in range(4):
        core.ingest(schema.Hello(rank=rank, world_size=4, strategy="fsdp", run="r", t=1.0), 1.0)
    said = []
    for n in (1, 2):
        for rank in range(4):
            mem = schema.Mem(params_bytes=full // 4 // shards, grads_bytes=full // 4 // shards, optim_bytes=full // 2 // shards,
                             params_full_bytes=full // 4, grads_full_bytes=full // 4, optim_full_bytes=full // 2, shards=shards)  # fmt: skip
            core.ingest(schema.Step(rank=rank, step=n, seq=n, t=1.0 + n, step_s=0.1, mem=mem, run="r"), 1.0 + n)
        said += [m for m in core.tick(1.0 + n).messages if isinstance(m, schema.Verdict)]
    core.recorder.close()
    assert said == [] and all(r.not_sharding is None for r in core.state.ranks.values())
    rep = build_report(str(path))
    mem = rep["memory"]
    assert mem["expected_bytes_per_rank"] == full // shards
    basis = "its state unsharded ÷ 2, the ranks it is sharded over" if shards == 2 else "its state unsharded, sharded over no other rank"
    assert mem["expected_basis"] == basis
    assert "ranks hold 1.00x what fsdp x4 should" in render_text(rep)


def _sharding_run(held_by_rank: dict[int, int], full: int, strategy: str = "fsdp"):
    """A hub that took one step of each rank holding ``held`` of a ``full`` state, then judged."""
    from pardash.telemetry.hubcore import HubCore

    core = HubCore(run_id="r")
    for rank in held_by_rank:
        core.ingest(schema.Hello(rank=rank, world_size=2, strategy=strategy, run="r", t=1.0), 1.0)

    def step(n: int, held: dict[int, int]) -> list[schema.Verdict]:
        for rank, h in held.items():
            mem = schema.Mem(params_bytes=h // 4, grads_bytes=h // 4, optim_bytes=h // 2,
                             params_full_bytes=full // 4, grads_full_bytes=full // 4, optim_full_bytes=full // 2)  # fmt: skip
            core.ingest(schema.Step(rank=rank, step=n, seq=n, t=1.0 + n, step_s=0.1, mem=mem, run="r"), 1.0 + n)
        frame = core.tick(1.0 + n)
        return [m for m in frame.messages if isinstance(m, schema.Verdict)]

    return core, step


def test_the_hub_says_which_ranks_of_a_sharded_run_hold_far_more_than_their_share():
    # Only the TUI's memory panel noticed (the alerts said "no alerts", the log and the report
    # nothing): the hub now judges it, once, and says when it is over.
    core, step = _sharding_run({0: 69_000, 1: 41_000}, full=80_000)
    said = step(1, {0: 69_000, 1: 41_000})
    assert [(v.rank, v.verdict) for v in said] == [(0, "not_sharding")]
    assert "1.7x its 1/2 share" in said[0].message and "fully_shard per block" in said[0].message
    assert step(2, {0: 69_000, 1: 41_000}) == []  # said once
    assert core.state.ranks[0].not_sharding is not None and core.state.ranks[1].not_sharding is None
    cleared = step(3, {0: 41_000, 1: 41_000})
    assert [(v.rank, v.verdict) for v in cleared] == [(0, "sharding_ok")]
    assert core.state.ranks[0].not_sharding is None


def test_a_replicated_run_is_never_told_it_does_not_shard():
    _, step = _sharding_run({0: 80_000, 1: 80_000}, full=80_000, strategy="ddp")
    assert step(1, {0: 80_000, 1: 80_000}) == []


def test_the_expectation_is_the_runs_own_state_over_n_not_16_bytes_a_parameter():
    # SGD holds no optimizer state: against 16 B a parameter, a rank holding 86% of its whole
    # state read "0.86x the expectation", all well; against its own state it is 1.7x its share.
    from pardash.telemetry.summary import expected_state_bytes

    assert expected_state_bytes(40_200, 5_149, 2, "fsdp") == (20_100, "its state unsharded ÷ 2")
    assert expected_state_bytes(40_200, 5_149, 2, "ddp") == (40_200, "its state unsharded")
    assert expected_state_bytes(None, 5_149, 2, "fsdp") == (41_192, "16 B/param ÷ 2")
    assert expected_state_bytes(None, 0, 2, "fsdp") == (None, "")



@pytest.mark.slow
def test_fsdp_gradient_accumulation_keeps_the_gradients_sharded(fsdp_memory):
    # The bundled trainer turned FSDP2's reduce-scatter off for every micro-batch but a step's
    # last: between them each rank held the whole unsharded gradients (100%, not its half),
    # while the memory view, read after the step, said the run saved half of them.
    for d in fsdp_memory.values():
        d = d["accum"]
        assert d["first"] == d["last"] == {"sharded": d["full"] // 2, "unsharded": 0}


def test_memory_is_measured_no_more_often_than_every_tenth_of_a_second_nor_past_its_budget():
    # Viewers see memory at the hub's frames, ten a second. Measured at every 2 ms step (its
    # cost under the 1% budget), it took 23 us of each DDP rank's step.
    from pardash.telemetry.memory import MEM_MAX_EVERY, measure_every

    assert [measure_every(5e-6, s) for s in (0.002, 0.03, 0.1, 2.0)] == [50, 4, 1, 1]
    assert measure_every(5e-6, 0.0) == 1  # the step time not known yet
    assert measure_every(0.004, 0.2) == 2  # 4 ms a measurement: 2% of a 200 ms step, so every other
    assert measure_every(0.004, 0.2, slots=2) == 4  # two optimizers' posts share the 1%
    assert measure_every(0.1, 0.002) == MEM_MAX_EVERY


def test_steps_close_together_repeat_a_measurement_until_a_tenth_of_a_second_has_passed(monkeypatch):
    # Measured every 50 steps of 2 ms; when the steps slow to a second each (a backbone
    # unfrozen, a larger batch), the next is measured at once: the 100 s the 49 repeats left
    # would have taken went by with the memory of the fast steps.
    import torch
    from torch import nn

    from pardash.telemetry import memory

    now = [1000.0]
    monkeypatch.setattr(memory, "_clock", lambda: now[0])
    monkeypatch.setattr(memory, "MEM_BUDGET", 1.0)  # (its cost, timed for real, never decides)
    model = nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    probe = memory.MemoryProbe()

    def measured(steps, step_s):
        fresh, last = [], probe.last
        for _ in range(steps):
            now[0] += step_s  # the step, then its optimizer's post-hook measures
            mem = probe.measure(model, [opt], step_s=step_s)
            fresh.append(mem is not last)
            last = mem
        return [i for i, f in enumerate(fresh) if f]

    assert measured(101, 0.002) == [0, 50, 100]
    assert probe.every == 50 and probe.last.params_bytes == (8 * 8 + 8) * 4
    assert measured(3, 1.0) == [0, 1, 2]  # (the first: 49 repeats were left)
    assert probe.every == 1
