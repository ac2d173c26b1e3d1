"""The bundled trainer's per-rank entry: ``python -m pardash.trainer.train [flags]``.

Run it under torchrun (``pardash launch`` does), or alone as one process. Every rank trains the
same model on its share of a synthetic dataset with the strategy ``--strategy`` names, and
publishes what it does through a :class:`~pardash.telemetry.reporter.Reporter` (a no-op when
PARDASH_ENDPOINT is unset): a hello, one step message per optimizer step with its phase times
and memory, epoch ends, errors and always an exit event.

Timing. On CPU every phase is stamped with ``perf_counter``, which is exact since the work is
done when the call returns. On GPU the stamps are CUDA events, and a step's times and loss are
read one step late, once the next step is queued: the only CPU-GPU synchronisation in the loop
is waiting for the previous step's last event, which the GPU has reached (or is about to) by
then, so the GPU is never left idle to report on it.

The step's "self time" is this rank's own work, which no other rank holds up: where a
straggler shows. DDP (no buffer broadcast): the time from the end of the previous step to the
start of the last micro-batch's backward, whose first bucket all-reduce is the step's first
collective; FSDP2, which all-gathers each block's parameters as the forward reaches it (a rank
slow in any block keeps the others waiting in a later collective): the same span less the time
in its collectives, where the waiting is (without comm timing, up to the root forward's
all-gather); single and dp: the whole step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

from pardash.trainer import startup

# As a rank's entry (python -m), its imports with the collector off (startup says why).
_COLLECTOR_WAS_ON = startup.quiet() if __name__ == "__main__" else None

import torch

from pardash.telemetry import sigterm
from pardash.telemetry.env import SUPERVISOR_VAR, rank_identity
from pardash.telemetry.memory import account
from pardash.telemetry.reporter import Reporter, say_unwatched
from pardash.telemetry.streams import Unbreakable, unbreakable_stdio

from . import checkpoint, resume
from .clock import StepClock, StepRecord
from .hooking import DDP_ALL_REDUCE
from . import config as config_mod
from .config import TrainConfig
from .data import build_dataset, build_loader, step_batches, steps_per_epoch
from .models import build_model, count_params
from .norms import GRAD_NORM, readable_norm
from .strategies import (
    CommTimer,
    Runtime,
    Wrapped,
    autocast,
    destroy_distributed,
    grad_sync,
    init_distributed,
    set_cpu_threads,
    wrap_model,
)

_queue_callback = torch.autograd.Variable._execution_engine.queue_callback

if _COLLECTOR_WAS_ON is not None:
    # Every torch.optim optimizer imports torch._dynamo (its _disable_dynamo wrapper, at the
    # first call): here instead, still with the collector off.
    import torch._dynamo  # noqa: F401

    startup.settle(_COLLECTOR_WAS_ON)


class InjectedCrash(RuntimeError):
    """Raised by --inject-crash."""


class BusyCompute:
    """Extra compute for a --inject-straggler RANK:compute:SECONDS rank.

    CPU: matrix products until this thread has worked SECONDS (its CPU time, not the wall
    clock: on a host saturated by other work a deadline by the clock made it work no more than
    the others, and it was taken for a rank starved by its host). GPU: a number of products
    calibrated once at start-up (the only synchronisation it adds), so that the loop itself
    never waits.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        n = 2048 if device.type == "cuda" else 96
        self.a = torch.randn(n, n, device=device)
        self.per_product_s = 0.0
        if device.type == "cuda":
            for _ in range(3):
                self.a @ self.a
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                self.a @ self.a
            end.record()
            end.synchronize()  # sync: one-time calibration, before the first step
            self.per_product_s = start.elapsed_time(end) / 1e3 / 20

    def run(self, seconds: float) -> None:
        if self.device.type == "cuda":
            for _ in range(max(1, math.ceil(seconds / self.per_product_s))):
                self.a @ self.a
            return
        deadline = time.thread_time() + seconds
        while time.thread_time() < deadline:
            self.a @ self.a


def lr_at(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Linear warm-up to cfg.lr, then constant or cosine decay to cfg.lr / 10: from the peak at
    the warm-up's last step, or (none) at step 1, down to the last step's. (Without warm-up the
    decay began before step 1: a run of one step trained at lr / 10, the help's "peak" never.)"""
    if cfg.warmup_steps and step <= cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return cfg.lr
    min_lr = cfg.lr / 10
    peak = cfg.warmup_steps or 1
    progress = (step - peak) / max(1, total_steps - peak)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))) * (cfg.lr - min_lr)


# -- the loop ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Between:
    """Where the loop is between its steps, beside ``rt.step`` (the step it is in): for the
    last step completed that the error event of a failure says (:func:`_done`)."""

    saving: bool = False
    """In the checkpoint save after step ``rt.step``: that step is done."""


def train(cfg: TrainConfig, rt: Runtime, reporter: Reporter, between: Between | None = None) -> None:
    """Train ``cfg`` on this rank, publishing through ``reporter``; ``between`` says whether it
    is saving, for the caller's word of a failure."""
    between = between if between is not None else Between()
    threads = set_cpu_threads(rt)
    is_master = rt.rank == 0

    # Identical initial weights on every rank: DDP would broadcast rank 0's anyway, FSDP2 does
    # not, and each rank shards what it built.
    torch.manual_seed(cfg.seed)
    model = build_model(cfg)
    params_count, params_bytes = count_params(model)
    w: Wrapped = wrap_model(model, cfg, rt)
    if w.strategy == "fsdp" and w.comm is not None:
        w.comm.reporter = reporter  # its blocking collectives are waits: phase "sync" there
    if w.strategy == "dp":  # DataParallel gathers each replica's scalar loss into a vector
        warnings.filterwarnings("ignore", message=".*gather along dimension 0.*")
    optimizer = torch.optim.AdamW(w.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    dataset = build_dataset(cfg)
    loader, sampler = build_loader(dataset, cfg, rank=rt.rank, world_size=rt.world_size,
                                   pin_memory=rt.is_cuda)
    per_epoch = steps_per_epoch(loader, cfg.grad_accum)
    total_steps = cfg.steps if cfg.steps is not None else (cfg.epochs or 1) * per_epoch

    # Faults this rank was asked to suffer (0: no such fault on this rank).
    straggler = cfg.inject_straggler
    if straggler is not None and straggler.rank != rt.rank:
        straggler = None
    stall, crash = cfg.inject_stall, cfg.inject_crash
    # The stall and the crash fire on the first attempt only: after torchrun restarts the
    # workers, the run goes on (from this job's last checkpoint, when it saves any). (A stall
    # that fired again after each restart made --max-restarts' recovery impossible to show.)
    restart = rank_identity().restart
    first_attempt = restart == 0
    stall_step = stall.step if stall is not None and stall.rank == rt.rank and first_attempt else 0
    crash_step = crash.step if crash is not None and crash.rank == rt.rank and first_attempt else 0
    busy = BusyCompute(rt.device) if straggler and straggler.kind == "compute" else None
    busy_armed = [False]
    # FSDP without comm timing (a torch without FSDP2's custom-collective hooks) measures self
    # time up to the root forward's all-gather only: its injected work goes before that.
    busy_before_forward = w.strategy == "fsdp" and w.comm is None
    if busy is not None and not busy_before_forward:
        # Inside the model, where a slow layer would be: in the last block's forward, after
        # FSDP has all-gathered the blocks before it (a rank slow there keeps the others
        # waiting in a later collective, not the step's first).
        def slow_block(_module: Any, _args: Any) -> None:
            if busy_armed[0]:
                busy_armed[0] = False
                with torch.autocast(rt.device.type, enabled=False):  # the work it was calibrated as (fp32)
                    busy.run(straggler.seconds)

        w.inner.blocks[-1].register_forward_pre_hook(slow_block)

    reporter.hello(
        strategy=cfg.strategy,
        backend=rt.backend,
        device=str(rt.device),
        device_name=rt.device_name,
        device_mem_bytes=rt.device_mem_bytes,
        torch_version=torch.__version__,
        params_count=params_count,
        params_bytes=params_bytes,
        source="trainer",
        note=w.note,
        config={**cfg.to_dict(), "total_steps": total_steps},  # (--epochs: the steps they come to; viewers say "step N/TOTAL")
    )
    if is_master:
        print(
            f"pardash trainer: {cfg.strategy} on {rt.world_size} rank(s), "
            f"{rt.backend or 'no process group'}, {rt.device} ({threads} thread(s) per rank), "
            f"{cfg.model} {params_count:,} params, {total_steps} steps",
            flush=True,
        )
        if w.note and not reporter.enabled:  # (published, the viewers say it: once)
            print(f"note: {w.note}", flush=True)
        for said in cfg.start_notes(total_steps, rt.world_size):
            if not reporter.enabled:
                print(f"note: {said}", flush=True)
            reporter.event("warning", message=said)

    # -- resume: model, optimizer, step, data position, RNG from the newest checkpoint ------
    job = checkpoint.job_id()
    start = resume.resume(cfg, rt, w, optimizer, reporter, total_steps, restart=restart, job=job)
    if first_attempt and start.step and rt.rank == 0:
        # A fault at or before the step resumed from never fires: said, where the run ended
        # "done" with no crash and no word of it (the point of the flag is to watch one).
        for flag, fault in (("--inject-stall", stall), ("--inject-crash", crash)):
            if fault is not None and fault.step <= start.step:
                message = (f"{flag} {fault} will not fire: this run resumed at step {start.step}, past its step "
                           f"(give a step above {start.step})")
                print(f"note: {message}", flush=True)
                reporter.event("warning", message=message, step=start.step)
    # --checkpoint-keep counts this job's checkpoints and those of the job it went on from (a
    # run resumed again and again, requeued, keeps K in all, not K a job).
    own_jobs = {job}
    origin = ""
    """The job this one went on from: its checkpoints name it, so a damaged one of theirs falls
    back along this line (a restart from this job's own checkpoint keeps that one's origin)."""
    if cfg.checkpoint_dir and start.step:
        resumed_at = checkpoint.step_path(cfg.checkpoint_dir, start.step)
        by = checkpoint.saving_job(resumed_at)
        if by is not None:
            own_jobs.add(by)
        # Not known (its job file damaged, :func:`checkpoint.saving_jobs`): the run it went on
        # from is the one known link back.
        origin = checkpoint.resumed_from(resumed_at) if by in (job, None) else by
    epoch, into_epoch = start.epoch, start.steps_into_epoch
    if into_epoch >= per_epoch:  # a checkpoint from a world with longer epochs
        epoch, into_epoch = epoch + 1, 0
    batches = step_batches(loader, sampler, cfg.grad_accum, start_epoch=epoch)
    for _ in range(into_epoch):
        next(batches)  # the steps of this epoch taken before the checkpoint: same order, skipped

    # PARDASH_AB_STEPS=K (bench/throughput.py): publish only every other chunk of K steps and
    # time both kinds of chunk, so telemetry's cost is measured against itself switched off
    # seconds apart, in one run, where two runs minutes apart differ by more than that cost.
    ab_steps = int(os.environ.get("PARDASH_AB_STEPS", "0") or 0) if reporter.enabled else 0
    ab_s = {True: 0.0, False: 0.0}
    ab_n = {True: 0, False: 0}
    clock = StepClock(rt.is_cuda)
    pending: StepRecord | None = None  # GPU: the step whose numbers are read one step late
    micro_steps = cfg.grad_accum
    t_run = time.perf_counter()
    w.model.train()

    def publish(rec: StepRecord) -> None:
        if rt.is_cuda:
            # sync: wait for the previous step's last event. The GPU is busy with this step's
            # queued work meanwhile, so waiting here costs it nothing.
            rec.end.synchronize()
        times = clock.resolve(rec)
        loss = rec.loss.item()  # sync on GPU, but the step has completed (see above)
        # (read after the loss: the stream drained by its read, a copy of one number)
        norm = rec.grad_norm.item() if rec.grad_norm is not None else None
        custom = {GRAD_NORM: norm} if norm is not None and math.isfinite(norm) else {}
        comm_s = CommTimer.seconds(rec.comm) if rec.comm is not None else None  # (single: none, no one to wait for)
        self_s = times["self_s"]
        if w.strategy == "fsdp" and rec.comm is not None and rec.arrive is not None:
            # FSDP gathers each block's parameters as the forward reaches it: a rank slow in a
            # block keeps the others waiting in a later all-gather than the step's first. Its
            # own work up to the last backward (as DDP's: data and forward) is that time less
            # the time in those collectives, where the waiting for the others is.
            waited = CommTimer.seconds(rec.comm, within=(rec.marks[0][1], rec.arrive))
            self_s = max(0.0, times["self_s"] - waited)
        reporter.step(
            step=rec.step, epoch=rec.epoch, loss=loss, samples=rec.samples,
            step_s=times["step_s"], data_s=times["data_s"], forward_s=times["forward_s"],
            backward_s=times["backward_s"], optimizer_s=times["optimizer_s"], comm_s=comm_s,
            self_s=self_s, lr=rec.lr, mem=rec.mem, custom=custom,
        )
        if rec.last_in_epoch:  # after the epoch's last step, also when that is read late
            reporter.event("epoch_end", step=rec.step, message=f"epoch {rec.epoch} ended")  # (as a script's: trainer/epochs.py)
        if is_master and cfg.log_every and (rec.step % cfg.log_every == 0 or rec.step == 1):
            print(
                f"step {rec.step:>5}/{total_steps} | epoch {rec.epoch} | loss {loss:.4f} | "
                f"{times['step_s'] * 1e3:7.2f} ms | lr {rec.lr:.2e}",
                flush=True,
            )

    def _waits_from_here(grads: Any) -> None:
        # The loss's node runs first in the backward: queue, ahead of DDP's own callback that
        # waits for its all-reduces, the moment the rank's own work is done. From there it waits
        # for the others, its phase "sync" (a peer's hang read "rank 0 stalled in backward").
        _queue_callback(_syncing)

    def _syncing() -> None:
        reporter.set_phase("sync", DDP_ALL_REDUCE)

    for step in range(start.step + 1, total_steps + 1):
        rt.step = step
        marks = clock.start()
        on = not ab_steps or ((step - 1) // ab_steps) % 2 == 0
        t_step = time.perf_counter()

        # -- data: the next micro-batches, moved to the device ------------------------------
        reporter.set_phase("data")
        if step == crash_step:
            raise InjectedCrash(f"injected crash on rank {rt.rank} at step {step} (--inject-crash)")
        if step == stall_step:
            while True:  # --inject-stall: stuck in the data phase; the heartbeat thread goes on
                time.sleep(1.0)
        sb = next(batches)
        if straggler is not None and straggler.kind == "data":
            time.sleep(straggler.seconds)
        # GPU: pinned batches copy asynchronously, ordered on the stream (no sync).
        micro = [(x.to(rt.device, non_blocking=True), y.to(rt.device, non_blocking=True))
                 for x, y in sb.micro]
        lr = lr_at(step, cfg, total_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr

        # -- forward and backward, micro-batch by micro-batch -------------------------------
        arrive = None
        loss_sum = torch.zeros((), device=rt.device)
        for i, (x, y) in enumerate(micro):
            last = i == micro_steps - 1
            # DDP reduces gradients across ranks on the last micro-batch only (FSDP: each one).
            with grad_sync(w, sync=last):
                marks.append(("forward", clock.stamp()))
                reporter.set_phase("forward")
                busy_armed[0] = i == 0 and busy is not None
                if i == 0 and busy is not None and busy_before_forward:
                    busy.run(straggler.seconds)
                if i == 0 and w.strategy == "fsdp" and w.comm is None:
                    arrive = clock.stamp()  # the root's pre-forward hook all-gathers
                with autocast(w, rt.device):
                    loss = w.model(x, y)
                if loss.dim():  # DataParallel: one loss per replica
                    loss = loss.mean()
                loss = loss / micro_steps

                marks.append(("backward", clock.stamp()))
                reporter.set_phase("backward")
                if last and (w.strategy == "ddp" or (w.strategy == "fsdp" and w.comm is not None)):
                    # DDP: backward launches the first bucket's all-reduce; FSDP: up to here,
                    # less the all-gathers (see publish)
                    arrive = clock.stamp()
                    if w.strategy == "ddp" and reporter.enabled and loss.grad_fn is not None:
                        loss.grad_fn.register_prehook(_waits_from_here)
                loss.backward()
            loss_sum += loss.detach()

        # -- optimizer ----------------------------------------------------------------------
        marks.append(("optimizer", clock.stamp()))
        reporter.set_phase("optimizer")
        grad_norm = None
        if cfg.grad_clip:
            grad_norm = readable_norm(torch.nn.utils.clip_grad_norm_(w.model.parameters(), cfg.grad_clip))
        optimizer.step()
        # After the step and before zero_grad: parameters, gradients and Adam state all held.
        # Sizes and the allocator's counters are host-side figures: no sync.
        # Only when someone listens: with PARDASH_TELEMETRY=0 the loop pays nothing for it.
        mem = account(w.inner, optimizer, ddp_module=w.model if w.strategy == "ddp" else None) if reporter.enabled and on else None
        optimizer.zero_grad(set_to_none=True)
        end = clock.end()

        rec = StepRecord(
            step=step, epoch=sb.epoch, loss=loss_sum, marks=marks, end=end, arrive=arrive,
            comm=w.comm.take() if w.comm is not None else None, lr=lr,
            samples=cfg.batch_size * micro_steps, mem=mem, last_in_epoch=sb.last_in_epoch, grad_norm=grad_norm,
        )
        if not on:
            pass  # an A/B chunk without telemetry (PARDASH_AB_STEPS)
        elif rt.is_cuda:  # read one step late: this step's work is queued, the last one done
            if pending is not None:
                publish(pending)
            pending = rec
        else:
            publish(rec)
        if ab_steps:
            ab_s[on] += time.perf_counter() - t_step
            ab_n[on] += 1
        epoch, into_epoch = (sb.epoch + 1, 0) if sb.last_in_epoch else (sb.epoch, into_epoch + 1)

        # -- checkpoint: every --checkpoint-every steps and after the last -----------------
        every = cfg.checkpoint_every
        if cfg.checkpoint_dir and (step == total_steps or (every and step % every == 0)):
            if pending is not None:  # the save syncs anyway: publish this step first
                publish(pending)
                pending = None
            reporter.set_phase("checkpoint")
            between.saving = True  # (a failure from here on is after the step, not in it)
            progress = checkpoint.Progress(
                step=step, epoch=epoch, steps_into_epoch=into_epoch, total_steps=total_steps,
                lr=lr, seed=cfg.seed, world_size=rt.world_size, **resume.data_flags(cfg),
            )
            try:
                path, save_s = checkpoint.save(cfg.checkpoint_dir, progress, w=w, optimizer=optimizer,
                                               rank=rt.rank, device=rt.device, job=job, origin=origin)
                failed = ""
            except checkpoint.CheckpointSaveError as exc:
                path, failed = checkpoint.step_path(cfg.checkpoint_dir, step), str(exc)
            # A save that failed (a full disk) costs that checkpoint, not the run: days of
            # training must not end on it, nor torchrun's restarts be spent failing at the same
            # save. Every rank learns the outcome (DCP's own error reaches all of them; this
            # keeps them together whatever failed where), and the next interval tries again.
            if not checkpoint.on_every_rank(not failed, rt.device):
                if rank_identity().local_rank == 0 and not checkpoint.is_complete(path):
                    shutil.rmtree(path, ignore_errors=True)  # a half-written folder fills the disk
                said = failed or f"checkpoint save to {path} failed on another rank"
                if step < total_steps:  # the last step always saves
                    said += f"; training goes on, the next try at step {min(step + every, total_steps) if every else total_steps}"
                else:
                    said += "; the run ends without its final checkpoint"
                reporter.event("warning", message=said, step=step)
                if is_master:
                    print(f"pardash trainer: warning: {said}", file=sys.stderr, flush=True)
                clock.restart()
                between.saving = False
                continue
            reporter.event("checkpoint", message=str(path), step=step, duration_s=save_s)
            if is_master:
                print(f"checkpoint: step {step} saved to {path} in {save_s:.2f} s", flush=True)
            if cfg.checkpoint_keep and rank_identity().local_rank == 0:
                # After the save every rank's shard is written (DCP ends on a collective): the
                # first process of each node prunes, so a folder per node is pruned too.
                for old in checkpoint.prune(cfg.checkpoint_dir, cfg.checkpoint_keep, upto=step, jobs=own_jobs):
                    if is_master:
                        print(f"checkpoint: removed {old} (--checkpoint-keep {cfg.checkpoint_keep})", flush=True)
            clock.restart()
            between.saving = False

    if pending is not None:
        publish(pending)
    if is_master:
        run_s = time.perf_counter() - t_run
        ran = max(0, total_steps - start.step)
        if ran:
            print(
                f"done: {ran} steps in {run_s:.2f} s ({run_s / ran * 1e3:.1f} ms/step)"
                + (f", from step {start.step} to {total_steps}" if start.step else ""),
                flush=True,
            )
        else:  # (not "0 steps in 0.00 s (0.2 ms/step)")
            print(f"done: no step taken (resumed at step {start.step}, --steps {total_steps})", flush=True)
        if ab_steps and ab_n[True] and ab_n[False]:
            print(
                f"ab: telemetry on {ab_n[True]} steps {ab_s[True] / ab_n[True] * 1e3:.4f} ms/step, "
                f"off {ab_n[False]} steps {ab_s[False] / ab_n[False] * 1e3:.4f} ms/step",
                flush=True,
            )


# -- entry -------------------------------------------------------------------------------------


def _record_error_file(e: BaseException, with_traceback: bool = True) -> None:
    """Write torchrun's error file (TORCHELASTIC_ERROR_FILE) so the launcher can name the
    root cause, as torch's @record decorator would. ``with_traceback`` False: the error's one
    line alone, which torchrun's failure summary then shows in place of the traceback."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    if not with_traceback:
        # torchrun's format: {"message": {"message", "extraInfo": {"py_callstack", "timestamp"}}},
        # the message shown when there is no py_callstack.
        data = {"message": {"message": f"{type(e).__name__}: {e}", "extraInfo": {"timestamp": str(int(time.time()))}}}
        try:
            with open(path, "w") as fh:
                json.dump(data, fh)
        except OSError:
            pass
        return
    try:
        from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

        ErrorHandler().record_exception(e)
    except Exception:
        pass


def _done(rt, between: Between) -> int | None:
    """The last step the loop completed, as error events carry it (None before the loop): the
    one before the step it is in, or that step in the save after it (a rank that failed in
    the save after step 40 said 39, its heartbeat 40)."""
    if rt.step is None:
        return None
    return rt.step if between.saving else rt.step - 1


def _usage_error(prog: str, message: str, reporter: Reporter | None = None) -> int:
    """Print a one-line usage error, publish it, and return exit code 2."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    reporter = reporter or Reporter.from_env()
    reporter.event("error", message=message)
    reporter.event("exit", code=2)
    reporter.close()
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run one rank; returns the exit code (0 success, 1 error, 2 bad flags)."""
    # Its output goes to a file in the run's folder (or a pipe): a disk that fills, or a reader
    # that goes, must cost lines of it, never the training.
    unbreakable_stdio()
    prog = "pardash-train"
    parser = argparse.ArgumentParser(
        prog=prog, description="The pardash bundled trainer (one rank; run it under torchrun)."
    )
    config_mod.add_arguments(parser)
    try:
        cfg = config_mod.from_args(parser.parse_args(argv))
    except ValueError as e:
        return _usage_error(prog, str(e))
    except SystemExit as e:  # argparse: it has printed its message already
        code = e.code if isinstance(e.code, int) else 2
        if code:
            reporter = Reporter.from_env()
            reporter.event("error", message="bad command-line flags")
            reporter.event("exit", code=code)
            reporter.close()
        return code

    say_unwatched("use `pardash launch` with these flags")
    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    gpu_index = local_rank if cfg.device != "cpu" and torch.cuda.is_available() else None
    reporter = Reporter.from_env(gpu_index=gpu_index)
    # The exit a rank decided on its error, until it sends it: torchrun stops a rank (SIGTERM)
    # once another has exited, and a rank that failed of the same error as that one, a moment
    # behind it, read "stopped by torchrun" and was left out of the error's ranks.
    decided: dict = {}
    if reporter.enabled:
        sigterm.at_stop(reporter.close)  # (stopped by torchrun: its last burst of steps goes first)
        sigterm.at_stop(lambda: decided and reporter.event("exit", **decided))  # (runs first)
    _say_when_output_fills(reporter)
    try:
        rt = init_distributed(cfg)
    except ValueError as e:
        return _usage_error(prog, str(e), reporter)

    code = 0
    stopped = False
    between = Between()
    try:
        train(cfg, rt, reporter, between)
    except KeyboardInterrupt:
        # Ctrl-C (a plain torchrun's reaches every rank), a stop: said as autorun says it
        # (trainer.autorun's _stopped), not as an error "interrupted"
        code, stopped = 130, True
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        raise
    except resume.ResumeError as e:
        # Every rank fails with it together: rank 0 says it, in one line (the lines before it
        # named each checkpoint and why it could not be read); a traceback would point at code.
        code = 1
        reporter.event("error", message=str(e), step=_done(rt, between))
        decided.update(code=code, step=rt.step)
        if rt.rank == 0:
            print(f"{prog}: error: {e}", file=sys.stderr, flush=True)
        _record_error_file(e, with_traceback=False)
    except BaseException as e:  # Exception, and DCP's CheckpointException (a BaseException)
        code = 1
        tb = traceback.format_exc()
        print(tb, file=sys.stderr, flush=True)
        # DCP's CheckpointException says only which ranks failed on its first line: name theirs.
        text = resume.one_line(e, 4000) if getattr(e, "failures", None) else f"{type(e).__name__}: {e}"
        reporter.event("error", message=text, traceback=tb, step=_done(rt, between))
        decided.update(code=code, step=rt.step)
        _record_error_file(e)
    finally:
        # The step the loop was in: its last when it finished, the one it failed in (none when
        # it failed before its first). The loop's own count: after a resume, or with steps
        # published a step late, the reporter's last step says otherwise.
        decided.clear()
        if not stopped:
            reporter.event("exit", code=code, step=rt.step)
        elif not os.environ.get(SUPERVISOR_VAR):  # (under pardash launch, its note says who stopped it)
            reporter.event("exit", code=-signal.SIGINT, step=rt.step, message="stopped by SIGINT")
        reporter.close()
        if code == 0:
            destroy_distributed(rt)
        # After an error the other ranks may be blocked in a collective with this one;
        # destroying the group could wait on them, so the process just exits.
    return code


def _say_when_output_fills(reporter: Reporter) -> None:
    """Publish a warning, once, when the rank's output (a file in the run's folder) cannot be
    written for a full disk: the file and the launch's terminal just stopped mid-line, and
    only result.json's failure said anything."""
    said = False

    def full(exc: OSError) -> None:
        nonlocal said
        if not said:
            said = True
            reporter.event("warning", message=f"its output cannot be written ({exc.strerror or exc}): its lines are lost until the disk has room")

    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, Unbreakable):
            stream.on_full = full


def _exit_now(code: int) -> None:
    """Exit without the interpreter's teardown. Everything this rank owes is out by now (the
    reporter closed with its linger, checkpoints written, the group destroyed); what is left is
    torch unloading module by module, about 0.9 s of a 2-core machine per rank per launch, which
    every launch would otherwise wait for."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe: nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
