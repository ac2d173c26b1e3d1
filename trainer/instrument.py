"""Zero-code instrumentation of a training script, through PyTorch's global hooks.

``python -m pardash.trainer.autorun SCRIPT`` (what ``pardash launch -- SCRIPT`` runs on each
rank) installs an :class:`Instrument` before the script runs; the script is not changed. What
is hooked, and what each hook tells:

- optimizer step pre/post hooks (``torch.optim.optimizer.register_optimizer_step_*_hook``):
  step boundaries and optimizer time;
- module forward pre/post hooks (``register_module_forward_*_hook``), acting on the *root*
  call only, the outermost module call with parameters, under grad mode (a submodule call
  costs a depth increment): the start of a micro-batch's forward, its batch size (the first
  dimension of the first tensor argument; under tensor parallelism, whose group of ranks
  trains on one batch, this rank's share of it), and the model: the root modules seen
  training (the DDP or FSDP2 wrapper when there is one), whose type gives the strategy. Once the same roots
  have trained for ``SETTLE_STEPS`` steps, the global hooks give way to hooks on the roots
  alone (and torch's ``AveragedModel``s, an EMA or SWA, only ever evaluated: its ``__init__``
  is followed), so submodule calls go back to PyTorch's fast path; a new optimizer, or a root
  freed, brings the global hooks back to find the next model. Models and optimizers are held
  weakly: a script that trains one after another (k-fold, a sweep) frees each as it would
  without pardash, and memory describes the ones alive;
- ``torch.autograd.backward`` (which ``Tensor.backward`` calls): the start of each backward,
  the loss (the tensor backpropagated) and the micro-batch count; ``torch.autograd.grad`` as
  the same when it takes the gradients of parameters an optimizer holds, without a graph of
  them (data parallel by hand: ``grads = torch.autograd.grad(loss, params)``, all-reduced, set
  as ``p.grad``; not a gradient penalty's, of the inputs); ``nn.Module.train``: an
  evaluation's start and end;
- ``torch.distributed.init_process_group``: the backend (and an early hello);
  ``DistributedSampler.set_epoch``: the epoch (a script without one, Hugging Face's Trainer and
  accelerate's loaders among them: a new pass over the DataLoader its training batches come
  from, or over one made anew on the same dataset, ``DataLoader.__iter__`` and its iterators'
  ``__next__``, which also tell a validation loader's pass); ``GradScaler.scale``: the unscaled loss behind
  a scaled one; ``GradScaler.step``: a step it skipped (inf gradients) still ends a round;
  ``Optimizer.zero_grad`` and ``Module.zero_grad``: right after a backward, or after the forward
  that follows one, maybe an iteration that skipped its optimizer step (see :mod:`~pardash.trainer.skips`);
  ``torch.jit.script``: the roots' hooks are lifted while it compiles (hooks on a module are
  ``_Hook`` objects, which ``Module.__getstate__`` leaves out of copies and pickles);
  ``torch.save`` and ``torch.distributed.checkpoint``'s saves: the script's checkpoints (see
  :mod:`~pardash.trainer.saves`).

Step boundaries. A step is one *round* of optimizer steps: each optimizer in use steps once
(two optimizers stepped back to back, or a GAN's discriminator then generator with passes
between them), after one or more forward/backward passes (gradient accumulation: several
micro-batches, one step). A round ends when one of its optimizers steps again; its step ends
at the post-hook of the round's last optimizer step (the *cut*), and what came after the cut
is the next step's. With one optimizer, once it has stepped twice, each step is published at
its post-hook, after the update and before ``zero_grad`` frees the gradients, which is when
memory is read; with several, a step is published when the round ends (one step later), and so
it is while an optimizer made but not stepped yet holds weights of a model called since the last
step (a GAN's generator, called for the discriminator's fakes: its optimizer may step later in
the same iteration, from the second one or after a warm-up). An optimizer that first steps after
a step published at its post-hook (a model trained after another; a generator whose fakes are
made under ``no_grad`` only, once the hooks settled on the roots) is told apart by the next
repeat: the first optimizer again, and its passes join the next step; itself again, and it made
a step. The first pass inside ``optimizer.step(closure)`` is the step's own (its last
micro-batch): PyTorch Lightning runs ``training_step`` and the backward in such a closure. Later
passes in the same call (LBFGS's line search) are the optimizer's. (A WGAN's critic, stepping
five times per generator step, makes five steps: use ``pt.step()`` to count generator
iterations.) A script that never steps an optimizer (its update by hand) has its iterations
counted as steps, each ending after its backward: see :mod:`~pardash.trainer.skips`.

Phases are the intervals between marks, as in the bundled trainer: ``data`` from the end of
the previous step to the first root forward, ``forward`` to the backward (the loss function
included), ``backward`` to the first optimizer step (gradient clipping included),
``optimizer`` to the end; with several micro-batches, forward and backward add up, and the
time from a backward's return (or an optimizer step) to the next micro-batch's forward is
data again (the first step's data from the request for its first batch, when a DataLoader's
came before its forward). The waits in collectives the script calls itself between steps (a
barrier after the optimizer step) are in no phase: they are the step's ``comm_s``. So the phases
and ``comm_s`` sum to the step time. Of the data phase, the time inside a DataLoader (its
iterators' ``__next__``, and ``iter(loader)``, which starts its workers) is the step's ``loader_s``
(one ``perf_counter`` pair a batch), the rest the script's own work between steps; the heartbeat
says ``loader`` while the rank is in there (see :mod:`~pardash.trainer.epochs`). A trained
model put in eval mode between two steps is an evaluation, from ``model.eval()`` to
``model.train()`` (or, without those calls, its forwards in eval mode without grad; after ``model.eval()``, forwards with grad too, unless a
backward follows them: that is training with BatchNorm and dropout frozen); so is a model put in
eval mode by ``model.eval()`` before it was seen training (a baseline validation before the first
step) whose weights an optimizer already holds; and so, the model left in training mode (no
``model.eval()``), are its forwards (or its EMA's) without grad on the batches of a DataLoader
pass begun after the last optimizer step, once that pass goes on to its next batch, or runs
out, before training resumes (a validation loop): its phase is ``eval`` (the hub gives the ranks longer before
calling one stalled), an ``eval`` event says how long it took, and the next step's clock
starts when it ends; so step times sum to the run's wall time less its evaluations. A pass without grad of a model in training mode (a GAN's
fakes, the model's own targets, on the step's batch) or of a model not trained (a teacher's
targets) is part of the step. The learning rate is read as the round's first
optimizer step begins (a scheduler moves it right after).

Self time (``self_s``, the straggler signal) runs from the end of the previous step to this
rank's arrival at the step's first collective: DDP, the start of the backward whose gradients
are all-reduced (the first one outside ``no_sync``), less its wait in the broadcast of the
model's buffers as DDP's forward begins (BatchNorm's statistics, ``broadcast_buffers=True``);
FSDP2 (modules made by ``fully_shard``), whose pre-forward hooks all-gather each
block's parameters as the forward reaches it: the step's data and forward passes (backward
passes are left out, as DDP's self time ends at its backward), less the time spent in those
hooks (a pre-hook right before FSDP's and one right after it), where the waiting for the other
ranks is (those waits, and FSDP's collectives in the backward, are the step's ``comm_s``, out of
its forward and backward, as DDP's wait for its all-reduces is) (FSDP1, or a model compiled
whole: up to the first root forward; so tensor parallelism,
whose layers' collectives are untimed); a pipeline's stage (``torch.distributed.pipelining``,
see :class:`~pardash.trainer.pipelines.Pipelines`), the step less its waits for its neighbours;
one process alone, the whole step; otherwise unknown. Less, each time, the waits in collectives of the script's
own between steps, or between two micro-batches of a step (PyTorch Lightning broadcasts before
every batch), or in the forward of a micro-batch under DDP's ``no_sync`` (its ``self.log(...,
sync_dist=True)``): no arrival, those (see :mod:`~pardash.trainer.arrivals`). The rank before
the barrier is the one the others wait for, not the ones waiting in it.

Cost. On CPU the stamps are ``perf_counter`` and a step is published when it ends, or, in a
script that logs (``pt.log``), as the next one begins (what it logs after the optimizer step is
still the step's: see :meth:`~pardash.trainer.rounds.Rounds._next_step_begins`; a held step
keeps the time it ended, and the heartbeat says it done); on a GPU they are CUDA events and a
step is published once the next one ends (its events and loss are ready by then), so no hook
waits for the device. Memory accounting is the one expensive part:
it runs every step while it costs under 1% of the step time and the steps are 0.1 s apart or
more, else every few steps (:class:`pardash.telemetry.memory.MemoryProbe`). ``tests/scripts/measure_overhead.py`` measures
all of it.

An internal error in a hook never reaches the script: the instrumentation stops and says so in
a warning event. Forked children (DataLoader workers) inherit the hooks inert.

Here: the steps (forward and backward hooks, publishing). Beside it, parts of
the same :class:`Instrument`: :mod:`~pardash.trainer.watching` (where the module hooks are),
:mod:`~pardash.trainer.evaluations`, :mod:`~pardash.trainer.saves`, :mod:`~pardash.trainer.epochs`,
:mod:`~pardash.trainer.arrivals` (self time's end, FSDP2's waits),
:mod:`~pardash.trainer.rounds` (the optimizer hooks: rounds, cuts) and
:mod:`~pardash.trainer.skips` (iterations without an optimizer step); :mod:`~pardash.trainer.marks`
(the step as measured) and :mod:`~pardash.trainer.hooking` (hook objects and guards).
"""

from __future__ import annotations

import functools
import os
import time
import traceback
import warnings
import weakref
from typing import Any, Callable

import torch

from pardash.telemetry import api, memory, modelfacts
from pardash.trainer.strategies import CommTimer, with_attempt_store
from pardash.trainer.trained import FORWARD_ARRIVES, Trained, ddp_syncs_buffers, first_tensor, is_average, lr_of, rows
from pardash.telemetry.reporter import Reporter
from pardash.trainer.arrivals import FSDP_COLLECTIVES, Arrivals
from pardash.trainer.pipelines import Pipelines
from pardash.trainer.epochs import Epochs, _LoaderPass
from pardash.trainer.evaluations import Evaluations, _holds
from pardash.trainer.frameworks import Frameworks
from pardash.trainer.joins import Joins
from pardash.trainer.loads import Loads
from pardash.trainer.norms import GradNorms, group_lrs
from pardash.trainer.rounds import Rounds
from pardash.trainer.saves import Saves
from pardash.trainer.skips import Skips
from pardash.trainer.hooking import _get_ident, _guarded, _instruments, _is_compiling, _without_hooks_in_state
from pardash.trainer.marks import _Between, _Clock, _Cut, _Done, _OpenStep, micro_batches
from pardash.trainer.watching import Watching

WARN_AFTER_FORWARDS = 20
"""Forward passes without any optimizer step before the user is told how steps are counted,
and iterations by hand (see :mod:`~pardash.trainer.skips`) before they are counted as steps."""
NO_STEP_WARNING = (
    "no optimizer step seen after {n} updates by hand: counting a step at each backward after which "
    "the parameters change before the next forward (the time after it, the update by hand, is its "
    "optimizer phase); pardash.telemetry.step() marks steps exactly"
)
NO_STEP_UNCOUNTED = (
    "no optimizer step seen after {n} forward passes: pardash counts a step at optimizer.step(), or at "
    "a backward after which the parameters change (an update by hand); use pardash.telemetry.step() to mark steps"
)

_PHASE_FIELD = {"data": "data_s", "forward": "forward_s", "backward": "backward_s", "optimizer": "optimizer_s"}
"""A step phase's field in :class:`~pardash.telemetry.schema.Step`."""

COLLECTIVES = (
    "all_reduce", "barrier", "monitored_barrier", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
    "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
    "gather", "gather_object", "scatter", "scatter_object_list", *FSDP_COLLECTIVES,
)  # fmt: skip
"""``torch.distributed``'s collectives a script may call itself: each marks its rank's arrival
in a step, or a sync point between steps (see Arrivals._wrap_collective)."""

SETTLE_STEPS = 3
"""Steps with no new root module before the global module hooks give way to root hooks."""

class Instrument(Rounds, Watching, Evaluations, Saves, Loads, Epochs, Arrivals, Pipelines, Skips, Frameworks, Joins, GradNorms):
    """Measures a training loop through global hooks and publishes one Step per step."""

    def __init__(self, reporter: Reporter, *, warn_after: int = WARN_AFTER_FORWARDS) -> None:
        self.reporter = reporter
        self.warn_after = warn_after
        self.clock = _Clock()
        self._micro_said = False
        """A step of several micro-batches was published: every step says its count since
        (a last step of one, an epoch's remainder, read as the count of the step before it)."""
        self._lrs_said = False
        """A step's parameter groups had different lrs: every step says each group's since."""
        self._fsdp_norms = False
        """FSDP's ``clip_grad_norm_`` is wrapped (see pardash.trainer.norms)."""
        self._handles: list[Any] = []
        self._module_handles: list[Any] = []
        self.watching_all = False
        """True while global module hooks run (until the roots settle)."""
        self._settled_from = 0
        self._patched: list[tuple[Any, str, Any]] = []
        self._tid = _get_ident()
        """The training thread; module calls elsewhere (DataParallel replicas) are ignored."""
        self._pid = os.getpid()
        _instruments.add(self)
        self.dead = False
        """Set after an internal error: every hook does nothing from then on."""
        self._depth = 0
        # the model, as seen: weakly held, so a script that trains one model after another
        # (k-fold, a sweep) frees each as it would without pardash
        self.trained = Trained(self._root_gone)
        self._rewatch = False
        """A root went while its hooks could not be swapped: the next step swaps them."""
        self._swapping = False
        self.strategy = ""
        self._by_hand = False
        """The script all-reduces its gradients itself (no DDP or FSDP): see _all_reduce_by_hand."""
        self.backend = ""
        self._hello: dict[str, Any] = {}
        self._hello_sent = False
        self._lazy: Callable[[], Any] | None = None
        """The model whose lazy modules have parameters still to make, while it has."""
        self._hello_extra: dict[str, Any] = {}
        self._planned_steps: int | None = None
        """The steps the script's framework says the run ends at (see pardash.trainer.frameworks)."""
        self._framework_finders: list[Any] = []
        """Wait for the import of the frameworks whose planned steps are read."""
        # the step being measured
        self.step = 0
        self.epoch = 0
        self._sampler_epochs = False
        """A DistributedSampler's set_epoch has said the epoch: passes over loaders count no more."""
        self._averages: weakref.WeakSet[Any] = weakref.WeakSet()
        """torch's AveragedModels made (EMA, SWA): only ever evaluated, so never seen as roots;
        once the roots settle, they are hooked beside them (see _hooked_modules)."""
        self._rehook = False
        """An AveragedModel was made after the roots settled: hook the roots again at the next step."""
        self._epoch_sampler: weakref.ref | None = None
        """The sampler whose set_epoch said the epoch last; another one's lower epoch is not taken."""
        self._batch_pass: _LoaderPass | None = None
        """The loader pass that gave the latest batch."""
        self._train_pass: _LoaderPass | None = None
        """The pass whose batch the latest backward trained on: the training loader's."""
        self._open: _OpenStep | None = None
        self._phase = ""
        self._count_samples = False
        self._ddp_sync = False
        self._ddp_accumulates = False
        """The forward going is a DDP model's under ``no_sync`` (a micro-batch accumulated): a
        collective in it is a wait, not the step's arrival (see Arrivals._collective_begins)."""
        self._in_backward = False
        self._backward_end: Any = None
        """When the last backward returned (a micro-batch's data time runs from there)."""
        self._graph_done: Any = None
        """When a DDP backward's own work was done, its wait for the all-reduces beginning (see
        :meth:`~pardash.trainer.arrivals.Arrivals._watch_ddp_wait`)."""
        self._graph_watch = False
        """The hook on that backward's loss is to note it (see _graph_begins)."""
        self._ddp_backward = False
        """A backward that all-reduces DDP's gradients is running, its wait watched: a backward
        nested in it (a reentrant checkpoint's) has DDP's wait timed too (see
        Arrivals._nested_backward)."""
        self._scaled: dict[int, tuple[Any, Any]] = {}
        """id(scaled loss) -> (scaled, loss), for each GradScaler.scale() since the last backward."""
        self._eval_t0 = 0.0
        """perf_counter at the first no-grad root forward of an evaluation (0: none going)."""
        self._eval_t1 = 0.0
        self._eval_end: Any = None
        """Stamp at the end of the evaluation's last forward so far."""
        self._eval_called = False
        """The evaluation began at model.eval() (not at a forward without grad)."""
        self._eval_grad: list[Any] | None = None
        """[stamp, samples, root] of the forwards with grad since model.eval() (see _root_begin)."""
        self._eval_grad_pass = False
        self._eval_pending: tuple[_LoaderPass, int, bool] | None = None
        """An evaluation begun provisionally, at a forward without grad of the model in training
        mode on a batch of a loader pass begun between the steps: (that pass, its batches and
        whether it had run out, then). It stands if the pass gives another batch (or runs out)
        before training resumes (see Evaluations._eval_stands)."""
        self._eval_new: tuple[weakref.ref[Any], float] | None = None
        """A model not seen training put in eval mode (model.eval(): the outermost train call),
        and when: its forwards in eval mode are an evaluation if an optimizer holds its weights
        (a baseline validation before the first step; see _root_begin)."""
        self._eval_saves: list[tuple[float, float, Any]] = []
        """(perf_counter at its start, its seconds, the step clock's stamp at its end) of each save
        in the evaluation going: not the evaluation's time if it began before the evaluation's
        end (see Evaluations._eval_ends)."""
        self._train_depth = 0
        self.evals = 0
        # the script's own checkpoint saves (see pardash.trainer.saves)
        self._saving: tuple[str, str, float] | None = None
        """(the phase before it, where it goes, perf_counter at its start) while a save runs."""
        self._saves_held: list[dict[str, Any]] = []
        """The ``checkpoint`` events of the saves since the last step, sent as the next is published."""
        self._dcp_finder: Any = None
        """Waits for the import of torch.distributed.checkpoint, to wrap its saves."""
        self._library_finders: list[Any] = []
        """Waits for the import of the libraries whose saves are followed (see saves.LIBRARY_SAVES)."""
        self._state_dict_finder: Any = None
        """Waits for the import of DCP's state-dict helpers (see Saves._state_dicts_imported)."""
        self._not_stepping: dict[int, int] = {}
        """Thread id -> how many calls it is in that step an optimizer to make its state, not
        to train: their steps are no steps."""
        self.saves = 0
        # the script's own resumes (see pardash.trainer.loads)
        self._loading = False
        """A load followed is running (DCP's torch.load of each file is that one's)."""
        self._loaded_last: tuple[tuple[int | None, str], str, float] | None = None
        """((the steps it says, under which key), where from, seconds) of the latest load before
        the first step that held an optimizer's state: the resume's, once an optimizer loads its
        state (see pardash.trainer.loads)."""
        self._resumed = False
        """An optimizer has loaded its state before the first step: the process's resume, said."""
        self._step_base = 0
        """The steps done that a resumed checkpoint said: the first step here is the one after."""
        # optimizer rounds
        self._round: list[weakref.ref[Any]] = []
        """The optimizers that stepped in the round so far (weakly, as every optimizer here)."""
        self._posts = 0
        self._rounds = 0
        """Rounds ended so far."""
        self._early = False
        """Publish at the post-hook: one optimizer only, seen to step again (see _optimizer_post)."""
        self._last_round: list[weakref.ref[Any]] = []
        """The optimizers of the last round that ended."""
        self._last_post: Any = None
        """When the last optimizer step ended (work after it, before a forward, is data)."""
        self._in_optimizer = 0
        """Inside optimizer.step (a closure's passes after the first, LBFGS's: the optimizer's)."""
        self._closure: tuple[Any, int] | None = None
        """optimizer.step(closure) began at this stamp, with the open step at that many marks, and
        its closure's first pass is still to come or in its forward: that pass is the step's (a
        Lightning training_step and its backward), not the optimizer's; its backward's return
        is where the optimizer's phase begins."""
        self._orphan: tuple[weakref.ref[Any], _Cut] | None = None
        """An optimizer that stepped after a step published at its post-hook, and where."""
        self._closure_passes = 0
        self._published_round = False
        self._cut: _Cut | None = None
        """The open step as it stood at the round's last post-hook so far (round not ended)."""
        self._logging_to: api.Logged | None = None
        """The values of the step just cut, while the next has not begun: what the script logs
        meanwhile (``pt.log`` after the optimizer step) joins them (see Rounds._next_step_begins)."""
        self._logged_after: api.Logged | None = None
        """What the script logged after the last cut, taken from the API already (as that cut's
        step was published, or given back by a cut that ended no step): the open step's, before
        what the API holds now (see Rounds._logged_to_cut)."""
        self._resume_at: Any = None
        """Where the step after the cut starts when an evaluation followed the cut."""
        self._arrive_next: Any = None
        """An arrival at a collective after the cut: the next step's, unless the round goes on."""
        self._sync_next: list[tuple[Any, Any]] | None = None
        """Waits in collectives between steps after the cut (see Arrivals._synced): the next
        step's, unless the round goes on."""
        self._loader_next: float | None = None
        """Seconds in a DataLoader after the cut (see Epochs._loader_leaves): the next step's
        ``loader_s``, unless the round goes on."""
        self._sync_work: Any = None
        """An asynchronous collective called between steps, its wait() not called yet."""
        self._sync_work_name = ""
        """The torch.distributed function that made ``_sync_work`` (what its wait waits in)."""
        self._between: _Between | None = None
        """Collectives called since the last backward returned, between two micro-batches if
        another pass follows (see Arrivals._between_passes)."""
        self._skip_from: Any = False
        """A cut at a zero_grad after a backward is pending (see pardash.trainer.skips): the
        backward's end it took from the open step (None: none); False: no cut pending."""
        self._skip_batch = False
        self._skip_zeroed = False
        self._skip_more: list[tuple[Any, Any, Any, Any, Any, Any]] = []
        self._skip_grad: Any = None
        self._input: weakref.ref[Any] | None = None
        """The last training forward's first tensor argument (see pardash.trainer.skips)."""
        self._input_grad = False
        """The last training forward's first tensor required grad (an adversarial example's)."""
        self._returned: tuple[Any, Any, int, int, float | None, int, int, float | None] | None = None
        """The open step as the last backward returned: that stamp, the last training forward's
        input (weakly), the step's samples, FSDP2 waits, ``loader_s`` and waits in collectives
        between steps, and those after a pending cut (``_sync_next``, ``_loader_next``): where its iteration ended,
        should its gradients be zeroed after the next forward with no optimizer step (see
        Skips._zeroed_after_forward)."""
        self._pending_mem: Any = None
        self._explicit = False
        self._late: _Done | None = None
        """The last step published, not sent yet: on a GPU until the next one is published (its
        events and loss are ready by then), on CPU until the next one begins."""
        # warnings and memory
        self.forwards = 0
        self._forwarded: dict[int, int] = {}
        """Root id -> its training forwards begun since the last backward (see
        marks.micro_batches): a count, bounded by the roots, where a list of them grew with
        each forward of a script that never calls backward."""
        self._stepped = False
        self._warned = False
        # iterations by hand, no optimizer step (see pardash.trainer.skips)
        self._hand: list[Any] = []
        """Provisional ends of iterations by hand (skips._HandCut), not steps yet."""
        self._hand_on = False
        """Their ends are steps: enough were seen, and no optimizer stepped."""
        self._hand_after = False
        """A backward returned, no training forward since (the next one may end its iteration)."""
        self._hand_pending = False
        """The last provisional end awaits the next backward (gradients reset since, or kept?)."""
        self._hand_end: Any = None
        self._hand_marks = 0
        self._hand_coll_end: Any = None
        """The end of the last collective since that backward's return (the update's all-reduce)."""
        self._hand_syncs: list[tuple[Any, Any]] = []
        self._hand_t: tuple[float, float] = (0.0, 0.0)
        self._hand_params: list[weakref.ref[Any]] = []
        """The parameters whose values tell an update by hand (skips._hand_watched)."""
        self._hand_print: list[Any] = []
        """A few of their elements as the last backward returned."""
        self._hand_changed: Any = None
        """Whether they changed before the next training forward: a device tensor, read at the
        backward after it (skips._hand_updated)."""
        self._hand_updates = 0
        """Updates by hand seen."""
        self._hand_mem: Any = None
        self._hand_warned = False
        self.probe = memory.MemoryProbe()
        self._step_s = 0.0
        self._gathered: weakref.WeakSet[Any] = weakref.WeakSet()
        """FSDP2 modules whose all-gather waits are timed (see _watch_gathers)."""
        self._gather_handles: list[Any] = []
        self._gather_t: Any = None
        self._buffer_arrive: Any = None
        """The arrival a DDP forward that broadcasts its buffers took as it began, until the
        broadcast is timed as a wait (Arrivals._buffers_synced takes it back)."""
        self._tp_group = (1, 0)
        """(ranks in this rank's tensor-parallel group, its place in it): the group trains on
        one batch, each rank a share of its samples (see modelfacts.tensor_parallel_group)."""
        # pipeline parallelism (torch.distributed.pipelining; see _wrap_schedule_step)
        self._pp_stages: list[weakref.ref[Any]] = []
        """The pipeline stages made in this process (PipelineStage), weakly."""
        self._pp: tuple[int, int, bool, bool] | None = None
        """(its first stage, the pipeline's stages, holds the first, holds the last) once a
        schedule trained here: the rank is a pipeline's stage."""
        self._pp_in_step = False
        """A pipeline schedule's step() is running (its P2P waits are comm; see Arrivals)."""
        self._pp_finder: Any = None
        """Waits for the import of torch.distributed.pipelining, to wrap its schedules and stages."""

    @property
    def roots(self) -> list[Any]:
        """The root modules seen training that are still alive, oldest first."""
        return self.trained.roots

    @property
    def optimizers(self) -> list[Any]:
        """The optimizers seen stepping that are still alive, oldest first."""
        return self.trained.optimizers

    # -- installing -----------------------------------------------------------------------

    def install(self) -> "Instrument":
        from torch.optim import optimizer as optim_module

        self._handles = [
            optim_module.register_optimizer_step_pre_hook(self._optimizer_pre),
            optim_module.register_optimizer_step_post_hook(self._optimizer_post),
        ]
        self._watch_all_modules()
        # Those global hooks (until the roots settle) make torch.compile(module) warn that they
        # fire once more for its wrapper: the depth count takes the outer call as the root's, so
        # the warning is about pardash, not the script, and the script's output stays its own.
        warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks", category=UserWarning)
        self._patch(torch.autograd, "backward", self._wrap_backward)
        self._patch(torch.autograd, "grad", self._wrap_grad)
        self._patch(torch.optim.Optimizer, "__init__", self._wrap_optimizer_init)
        self._patch(torch.nn.Module, "train", self._wrap_train)
        if torch.distributed.is_available():
            self._patch(torch.distributed, "init_process_group", self._wrap_init_process_group)
            for name in COLLECTIVES:
                if hasattr(torch.distributed, name):
                    self._patch(torch.distributed, name, self._timed_by_hand(self._wrap_collective(name)))
            if hasattr(torch.distributed, "Work"):
                self._patch(torch.distributed.Work, "wait", self._wrap_work_wait)
        from torch.utils.data.distributed import DistributedSampler

        self._patch(DistributedSampler, "set_epoch", self._wrap_set_epoch)
        from torch.optim.swa_utils import AveragedModel

        self._patch(AveragedModel, "__init__", self._wrap_average_init)
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        self._patch(DataLoader, "__iter__", self._wrap_loader_iter)
        self._patch(_BaseDataLoaderIter, "__next__", self._wrap_loader_next)
        try:
            from torch.amp import GradScaler
        except ImportError:
            GradScaler = None
        if GradScaler is not None:
            self._patch(GradScaler, "scale", self._wrap_scale)
            self._patch(GradScaler, "step", self._wrap_scaler_step)
        self._patch(torch.optim.Optimizer, "zero_grad", self._wrap_zero_grad)
        self._patch(torch.nn.Module, "zero_grad", self._wrap_zero_grad)
        self._patch(torch.jit, "script", self._wrap_jit_script)
        self._watch_norms()
        self._watch_saves()
        self._watch_pipelining()
        self._watch_frameworks()
        self._patch(torch, "load", self._wrap_load)
        self._patch(torch.optim.Optimizer, "load_state_dict", self._wrap_optimizer_load)
        self._patch(torch.nn.Module, "__getstate__", _without_hooks_in_state)
        if torch.distributed.is_available():
            from torch.nn.parallel import DistributedDataParallel

            self._patch(DistributedDataParallel, "__getstate__", _without_hooks_in_state)
            if hasattr(DistributedDataParallel, "_sync_buffers"):
                self._patch(DistributedDataParallel, "_sync_buffers", self._wrap_ddp_buffer_sync)
            self._watch_joins()
        api.attach_auto(self)
        return self

    def uninstall(self) -> None:
        for h in self._handles + self._module_handles + self._gather_handles:
            h.remove()
        self._handles, self._module_handles, self._gather_handles = [], [], []
        self._unwatch_saves()
        self._unwatch_pipelining()
        self._unwatch_frameworks()
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched = []
        api.attach_auto(None)

    def _patch(self, owner: Any, name: str, wrap: Callable[[Any], Any]) -> None:
        original = getattr(owner, name)
        setattr(owner, name, functools.wraps(original)(wrap(original)))
        self._patched.append((owner, name, original))

    # -- module forward: the root call only (see pardash.trainer.watching) -------------------

    def _forward_pre(self, module: Any, args: Any) -> None:
        # First: torch.compile traces the hooks of the modules it compiles, and anything past
        # this line (a thread id, counters) would break its graph. The compiled model's own
        # call runs eagerly: that one is timed.
        if _is_compiling():
            return None
        if _get_ident() != self._tid:
            return None
        depth = self._depth
        if depth:  # a submodule: the hot path
            self._depth = depth + 1
            return None
        self._depth = 1
        if not self.dead:  # (_root_begin's guard, inline: one Python call less a step)
            try:
                _root_begin(self, module)
            except Exception as exc:
                self._fail(exc)
        return None

    def _forward_post(self, module: Any, args: Any, *rest: Any) -> None:
        # rest is (kwargs, output), or (output,) when the forward raised (always_call).
        if _is_compiling():
            return None  # (see _forward_pre)
        if _get_ident() != self._tid:
            return None
        depth = self._depth
        if depth > 1:
            self._depth = depth - 1
            return None
        if depth == 0:  # compiled, or called in a thread of its own
            return None
        self._depth = 0
        if self._count_samples:
            if not self.dead:  # (_root_end's guard, inline)
                try:
                    _root_end(self, args, rest[0] if len(rest) == 2 else None)
                except Exception as exc:
                    self._fail(exc)
        elif self._eval_t0:
            self._eval_end = self.clock.stamp()
            self._eval_t1 = time.perf_counter()
            if self._eval_grad_pass:  # its samples, should a backward make it training
                self._eval_grad_samples(args, rest[0] if len(rest) == 2 else None)
        return None

    @_guarded
    def _root_end(self, args: Any, kwargs: Any) -> None:
        self._count_samples = False
        if self._lazy is not None:
            self._made_lazy()
        first = first_tensor(args, kwargs)
        if self._skip_from is not False:
            self._skip_forward(first)
        self._note_input(first)
        n = rows(first)
        if n and self._open is not None and not self._pp_in_step:  # (a pipeline's: its step's batch, see _pipeline_step_ends)
            self._open.samples += n

    @_guarded
    def _root_begin(self, module: Any) -> None:
        trained = self.trained
        if not trained.has_params(module):  # a loss module, a transform: part of whatever phase it runs in
            return
        if self._in_backward:
            return  # recomputation inside a backward (activation checkpointing)
        if self._in_optimizer:
            self._closure_passes += 1
            if self._closure is None or self._closure_passes > 1:
                return  # a closure's later pass (LBFGS's line search): the optimizer's
            # (the closure's first pass: the step's, as any forward; see _optimizer_pre)
        new = self._eval_new
        if new is not None and _in_eval_mode(module) and not self._eval_t0 and _holds(new[0](), module):
            self._eval_of_new(module, new[1])
        if not torch.is_grad_enabled():
            if _in_eval_mode(module) and (trained.trains(module) or is_average(module)):
                # The model put in eval mode, without grad (or its weights' running average,
                # an EMA): a validation pass.
                self._eval_begins()
            else:  # (a GAN's generator, whose optimizer may not have stepped yet: _optimizer_post)
                if self._eval_pending is not None:
                    self._eval_stands()  # the next batch of a validation loop?
                p = self._batch_pass
                if p is not None and p.posts == self._posts and not self._eval_t0 and (trained.trains(module) or is_average(module)):
                    # The model left in training mode, on a batch of a loader begun since the
                    # last optimizer step: a validation loop, if that loader goes on to its
                    # next batch before training resumes (a GAN's fakes, a teacher's targets
                    # on an epoch's first batch: dropped then; see Evaluations._eval_stands).
                    self._eval_begins(loader_pass=True)
                trained.called_without_grad(module, self.step)
            if self._eval_t0 and self._batch_pass is not None and self._batch_pass.last_in_eval:
                # (a batch fetched in the evaluation: not the training batch a loop fetched before
                # it and runs on after it, an evaluation on tensors of its own between)
                self._batch_pass.evaluated = True
            return  # a pass of the step without grad: a GAN's fakes, a teacher's targets
        # A trained model in eval mode *with* grad may train (fine-tuning with BatchNorm and
        # dropout frozen by model.eval()) or be evaluated without torch.no_grad(): after
        # model.eval(), a backward tells (see _eval_trained), else model.train() ends the
        # evaluation as any other.
        if self._eval_called and _in_eval_mode(module) and (trained.trains(module) or self._evaluating_new(module)):
            if self._eval_grad is None:
                self._eval_grad = [self.clock.stamp(), 0, weakref.ref(module)]
            self._eval_grad_pass = True
            return
        if self._hand_after and not self._stepped and not self._explicit:
            self._hand_boundary()  # an iteration by hand may have ended (see pardash.trainer.skips)
        self.forwards += 1
        forwarded = self._forwarded
        forwarded[id(module)] = forwarded.get(id(module), 0) + 1
        if (not self._stepped and not self._warned and self.forwards >= self.warn_after and not self._explicit
                and not self._hand_updates):  # (updates by hand seen: they are counted, see pardash.trainer.skips)
            self._warned = True
            self.reporter.event("warning", message=NO_STEP_UNCOUNTED.format(n=self.warn_after))
        if id(module) not in trained.root_ids:
            self._add_root(module)
        trained.called(module, self.step)
        if self._phase != "forward":
            if self._between is not None:
                self._between_ends()  # (collectives since the last backward: between micro-batches)
            now = self._micro_batch_begins()
            self._mark("forward", now)
            self._count_samples = True
            if self.strategy in FORWARD_ARRIVES:
                self._arrive(now)  # the root's pre-forward hook all-gathers (TP: its layers' collectives follow)
        if id(module) in trained.ddp_ids:
            syncs = module.require_backward_grad_sync
            if syncs:
                self._ddp_sync = True  # the next backward all-reduces
            self._ddp_accumulates = not syncs  # (under no_sync: see Arrivals._collective_begins)
            self._buffer_arrive = None
            if not self._arrived() and ddp_syncs_buffers(module):
                # The broadcast of its buffers, first thing in its forward, is the step's
                # arrival until it is timed as a wait (Arrivals._wrap_ddp_buffer_sync), decided
                # each step from what ran: untimed (a torch whose DDP broadcasts elsewhere), a
                # data straggler's peers read as slow as it (torch.compile(DDP(model)) did so
                # while a torch with DDP._sync_buffers was taken to time it).
                self._buffer_arrive = self.clock.stamp()
                self._arrive(self._buffer_arrive)

    def _add_root(self, module: Any) -> None:
        self._settled_from = self.step
        strategy = self.trained.add_root(module)
        if strategy == "fsdp" and not modelfacts.tensor_parallel(module):
            # (2-D, FSDP over tensor parallelism: the forward's waits are the TP layers' too,
            # untimed, and "its forward less its all-gathers" held them: a data straggler's
            # peers read as slow as it. Self time ends as the forward begins, as TP's alone.)
            self._watch_gathers(module)
            self._watch_fsdp_norms()
        if not self.strategy or self.strategy == "single":
            self.strategy = strategy
        if self._pp is not None:
            self.strategy = modelfacts.pipelined(strategy if self.strategy == modelfacts.PIPELINE else self.strategy)
        tp_group = modelfacts.tensor_parallel_group(module)
        if tp_group[0] > 1 or len(self.roots) == 1:
            self._tp_group = tp_group
        if len(self.roots) == 1:
            facts = modelfacts.model_facts(module)
            cuda = facts["device"].startswith("cuda")
            if cuda != self.clock.cuda:
                before = self._open
                self.clock = _Clock(cuda=cuda)
                self._open = None  # stamps of the other kind cannot be compared with the new
                if cuda and before is not None and len(before.marks) == 1:
                    # The first step, opened as its first batch was asked for (see
                    # Epochs._first_batch_asked): that loading, in seconds, goes on before it.
                    now = time.perf_counter()
                    waits = CommTimer.seconds(before.syncs, within=(before.marks[0][1], now)) if before.syncs else 0.0
                    lead = max(0.0, now - before.marks[0][1] - waits)
                    self._open = _OpenStep(marks=[("data", self.clock.stamp())], lead_s=lead, lead_wait_s=waits,
                                           loader_s=before.loader_s)
            self._hello.update(facts)
        else:  # a second model (a GAN's): the hello counts the parameters of all, once each
            self._hello["params_count"], self._hello["params_bytes"] = self.trained.params()
        self._hello["strategy"] = self.strategy
        if modelfacts.has_lazy(module):
            self._lazy = weakref.ref(module)  # counted again at the end of its forward (_root_end)
        self._send_hello()

    def _made_lazy(self) -> None:
        """A model with lazy modules, its parameters made by its forward: its hello again,
        with them counted (the one at its first call said only those made already)."""
        module = self._lazy()
        if module is None:
            self._lazy = None
            return
        if self.step - self._step_base < 2 and modelfacts.has_lazy(module):
            return  # (a lazy module still unmade after a step is one the training never calls)
        self._lazy = None
        if len(self.roots) == 1:
            self._hello.update(modelfacts.model_facts(module))
            self._hello["strategy"] = self.strategy
        else:
            self._hello["params_count"], self._hello["params_bytes"] = self.trained.params()
        self._send_hello()

    # -- backward ------------------------------------------------------------------------------

    def _wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if self._in_backward or _get_ident() != self._tid or _is_compiling():
                if self._ddp_backward and self._in_backward and not self.dead and _get_ident() == self._tid:
                    return self._nested_backward(original, tensors, args, kwargs)  # (a reentrant checkpoint's)
                return original(tensors, *args, **kwargs)
            if not self.dead:  # (the guard of _backward_begins and _backward_returns, inline)
                try:
                    _backward_begins(self, tensors, args[0] if args else kwargs.get("grad_tensors"))
                except Exception as exc:
                    self._fail(exc)
            self._in_backward = True
            try:
                return original(tensors, *args, **kwargs)
            finally:
                self._in_backward = False
                if not self.dead:
                    try:
                        _backward_returns(self)
                    except Exception as exc:
                        self._fail(exc)

        return backward

    def _wrap_grad(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def grad(outputs: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            create_graph = kwargs.get("create_graph", args[2] if len(args) > 2 else False)
            if self._in_backward or _get_ident() != self._tid or _is_compiling() or create_graph or not self._of_an_optimizer(inputs):
                return original(outputs, inputs, *args, **kwargs)
            # The step's backward, by hand: its loss and phase as Tensor.backward's (the loss
            # read None and the backward's time counted as forward's).
            self._backward_begins(outputs, args[0] if args else kwargs.get("grad_outputs"))
            self._in_backward = True
            try:
                return original(outputs, inputs, *args, **kwargs)
            finally:
                self._in_backward = False
                self._backward_returns()

        return grad

    def _of_an_optimizer(self, inputs: Any) -> bool:
        """Whether the first of ``inputs`` is a parameter a live optimizer holds."""
        first = inputs[0] if isinstance(inputs, (list, tuple)) and inputs else inputs
        if not isinstance(first, torch.nn.Parameter):
            return False
        return self.trained.holds(first)

    def _wrap_optimizer_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        made = self.trained.made

        def __init__(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            original(optimizer, *args, **kwargs)
            made(optimizer)

        return __init__

    @_guarded
    def _backward_begins(self, tensors: Any, grads: Any = None) -> None:
        if self._skip_from is not False:
            self._skip_backward()  # gradients zeroed between two backward passes of one iteration?
        if self._hand_pending and not self._in_optimizer:
            self._hand_confirm()  # the iteration by hand before it ended? (see pardash.trainer.skips)
        if self._eval_grad is not None:
            evaluated = self._eval_grad[2]()
            if evaluated is not None and self.trained.trained_by_an_optimizer(evaluated):
                self._eval_trained()
            else:  # that model is gone or trained no more (a fold ended on it): it was evaluated
                self._eval_ends()
        if self._in_optimizer and self._closure is None:  # a closure's later backward (LBFGS)
            if self._open is not None and not self._open.losses:
                loss = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
                if isinstance(loss, torch.Tensor) and loss.numel() == 1:
                    self._open.losses.append(loss.detach())
            return
        if self._between is not None:
            self._between_ends()
        now = self._micro_batch_begins()
        self._mark("backward", now)
        if self._batch_pass is not None and self._batch_pass is not self._train_pass:
            self._trains_from(self._batch_pass)
        step = self._open
        step.micro += 1
        step.passes.append((self._posts, tuple(self._forwarded.items())))
        self._forwarded.clear()
        # torch.autograd.backward([l1, l2]) backpropagates their sum, as two backward() calls
        # would: each one-element tensor is a loss of the step (it took the first alone).
        many = isinstance(tensors, (list, tuple))
        scaled = self._scaled
        for k, loss in enumerate(tensors if many else (tensors,)):
            if not isinstance(loss, torch.Tensor):
                continue
            if loss.numel() == 1:
                pair = scaled.get(id(loss)) if scaled else None
                if pair is not None and pair[0] is loss:
                    loss = pair[1]  # GradScaler: report the loss, not loss * scale
                step.losses.append(loss.detach())
            else:
                # Per-sample losses backpropagated with their weights (``per.backward(w)``):
                # the loss whose gradient that is, sum(per * w), computed on the device as the
                # step's other losses (read a step late); the step had none.
                # Only per-sample losses: a vector, or a loss function's output (token losses,
                # reduction="none"). An activation sent backward with the gradient the next
                # stage sent back (pipeline parallelism by hand: ``act.backward(grad)``) is no
                # loss: sum(act * grad) read as the first stage's, a loss it never had.
                g = (grads[k] if k < len(grads) else None) if many and isinstance(grads, (list, tuple)) else grads
                if isinstance(g, torch.Tensor) and g.shape == loss.shape and _per_sample_losses(loss):
                    with torch.no_grad():
                        step.losses.append((loss.detach() * g).sum())
        if scaled:
            self._scaled = {}
        if self._ddp_sync:
            self._arrive(now)  # the backward launches the first bucket's all-reduce
            self._watch_ddp_wait(tensors)
        self._ddp_sync = self._ddp_accumulates = False

    @_guarded
    def _backward_returns(self) -> None:
        self._backward_end = end = self.clock.stamp()
        self._graph_watch = self._ddp_backward = False  # (a loss backpropagated again, its graph retained, waits for no all-reduce)
        if self._graph_done is not None:
            self._ddp_waited()
        step = self._open
        if step is not None:  # (see _returned: a tuple, the cheapest to make a backward; DDP's wait in it)
            self._returned = (end, self._input, step.samples, len(step.waits), step.loader_s, len(step.syncs),
                              len(self._sync_next or ()), self._loader_next)  # fmt: skip
        if self._skip_from is not False:
            self._skip_grads()  # (a cut pending: the gradients the optimizer should step on)
        if self._in_optimizer and self._closure is not None:
            # the closure's first pass is over: what follows in optimizer.step is the optimizer's
            self._closure = None
            self._mark("optimizer", self._backward_end)
        elif not self._stepped and not self._explicit and not self._in_optimizer:
            self._hand_returned()  # (no optimizer step yet: maybe an update by hand follows)

    def _wrap_scale(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def scale(scaler: Any, outputs: Any) -> Any:
            scaled = original(scaler, outputs)
            if isinstance(outputs, torch.Tensor):
                self._scaled[id(scaled)] = (scaled, outputs)
            elif isinstance(outputs, (list, tuple)) and isinstance(scaled, (list, tuple)):
                for one, loss in zip(scaled, outputs):  # backward([scaler.scale(l1), ...])
                    if isinstance(loss, torch.Tensor):
                        self._scaled[id(one)] = (one, loss)
            return scaled

        return scale

    # -- explicit steps (pardash.telemetry.step) ---------------------------------------------

    @_guarded
    def use(self, model: Any, optimizer: Any, hello: dict[str, Any]) -> None:
        if model is not None and id(model) not in self.trained.root_ids:
            self._add_root(model)
        for opt in api._as_list(optimizer):
            self.trained.add_optimizer(opt, self.step)
        if hello:
            self._hello_extra.update(hello)
            if self._hello_sent:
                self._send_hello()

    @_guarded
    def begin_explicit(self) -> None:
        if self._logging_to is not None:
            self._next_step_begins()  # (the block is the next step)
        if not self._explicit:
            if self._round:
                self._round_ends()
            self._explicit = True
            self._hand_clear()
        self._open = _OpenStep(marks=[("data", self.clock.stamp())])
        self._phase = "data"
        self._round = []

    def steps_done(self) -> int:
        """The steps ended so far: those published, and the one whose round is cut and not yet
        published (see Rounds), as a save's or an evaluation's event counts them."""
        return self.step + (self._cut is not None)

    @_guarded
    def end_explicit(self, logged: api.Logged) -> None:
        mem, self._pending_mem = self._pending_mem, None
        if self._logged_after is not None:  # (logged after the last automatic step's cut)
            before, self._logged_after = self._logged_after, None
            logged = before.merge(logged)
        self._publish(self.clock.stamp(), mem, logged)
        self._round = []

    # -- publishing ------------------------------------------------------------------------------

    def _mark(self, phase: str, stamp: Any) -> None:
        if self._logging_to is not None:
            self._next_step_begins()
        if self._open is None:
            self._open = _OpenStep(marks=[("data", stamp)])
        self._open.marks.append((phase, stamp))
        self._phase = phase
        self.reporter.set_phase(phase)

    def _memory(self, force: bool = False, slot: int = 0) -> Any:
        """Memory held now, at the ``slot``-th optimizer post of the step (see
        :meth:`MemoryAccountant.measure`)."""
        model, new = self.trained.accountable(self.step)
        if model is None:
            return None
        # another model (or set) than the last measured: measured now
        probe = self.probe
        held = probe.repeat(model, force=force or new, slot=slot)
        if held is not memory.DUE:  # most steps (see memory.measure_every)
            return held
        return probe.measure(model, self.optimizers, ddp_module=self.trained.ddps_of(model), step_s=self._step_s, force=True, slot=slot)

    def _publish(self, end: Any, mem: Any, logged: api.Logged | None = None, held: bool = False,
                 ended: tuple[float | None, float | None] = (None, None)) -> None:
        """End the open step at ``end`` and publish it (a GPU step: once the next one ends), with
        ``logged`` (None: what the script logged since the last step, at its post-hook).
        ``held``: published at its cut, the next step not begun; what the script logs until
        it begins is this step's too, so on CPU it goes out then (see Rounds._next_step_begins).
        ``ended``: the wall and monotonic clocks when it ended (a cut's, published later), else now."""
        step = self._open or _OpenStep(marks=[("data", end)])
        self.step += 1
        if step.lr is None and self._round:
            step.lr, step.lrs = lr_of(self._round[0]()), group_lrs(self._round[0]())
        lr = step.lr
        if self._saves_held:  # (the checkpoints saved since the last step, theirs)
            self._send_saves()
        if logged is None:
            logged = api.take_logged() if self._logged_after is None else self._logged_to_cut()
        t, mono = ended
        done = _Done(self.step, self.epoch, step, end, lr, mem, logged,
                     t if t is not None else time.time(), mono if mono is not None else time.monotonic())
        self._open = _OpenStep(marks=[("data", end)])
        self._phase = "data"
        self.reporter.set_phase("data")
        if self._rewatch and not self.watching_all and self._depth == 0:
            self._watch_all_modules()  # a root went (see _root_gone)
        elif self.watching_all and self.trained.has_roots() and self._depth == 0 and self.step - self._settled_from >= SETTLE_STEPS:
            self._watch_roots()  # at depth 0: no module call is between its pre- and post-hook
        elif self._rehook and not self.watching_all and self._depth == 0:
            self._watch_roots()  # an AveragedModel made since they settled
        self._rehook = False
        late, self._late = self._late, done  # (a step held on CPU: none began since it)
        if late is not None:
            self._emit(late)
        if held:
            self._logging_to = done.logged
        elif not self.clock.cuda:
            self._late = None
            self._emit(done)
        # The heartbeat says the steps done, this one too while it is held (on CPU until the next
        # begins, on a GPU until the next ends): it said the one before, so a rank hung in its
        # data loader after step 5 read "stalled after step 4", and its held step, sent at its
        # exit, "resumed at step 5" (the hub takes a heartbeat ahead of the steps as progress).
        self.reporter.last_step = self.step

    def _emit(self, d: _Done) -> None:
        clock = self.clock
        if clock.cuda:
            d.end.synchronize()  # sync: the step's last event; the device is a step ahead by now
        out: dict[str, Any] = {"data_s": 0.0, "forward_s": 0.0, "backward_s": 0.0, "optimizer_s": 0.0}
        opened = d.open
        marks = opened.marks
        bounds = marks + [("", d.end)]
        evaluated = 0.0  # (an evaluation inside the step, see Evaluations._eval_begins: no phase of it)
        if clock.cuda:
            for (phase, a), (_, b) in zip(bounds, bounds[1:]):
                if phase == "eval":
                    evaluated += clock.seconds(a, b)
                else:
                    out[_PHASE_FIELD[phase]] += clock.seconds(a, b)
            step_s = clock.seconds(marks[0][1], d.end) - evaluated
        else:  # perf_counter stamps: the differences inline (a call a mark, each step, adds up)
            for (phase, a), (_, b) in zip(bounds, bounds[1:]):
                if phase == "eval":
                    evaluated += b - a
                else:
                    out[_PHASE_FIELD[phase]] += b - a
            step_s = d.end - marks[0][1] - evaluated
        lead = opened.lead_s
        if lead or opened.lead_wait_s:  # (the first batch, asked for before the clock turned to CUDA events)
            out["data_s"] += lead
            step_s += lead + opened.lead_wait_s
        self._step_s = step_s
        syncs = opened.syncs
        gathers = opened.waits
        waited = 0.0  # (of which in its data and forward phases)
        synced_s = 0.0  # (of which in collectives between steps, not FSDP2's all-gathers)
        if syncs or opened.lead_wait_s or gathers:
            # Waiting for the other ranks (in a barrier after the optimizer step, say): the
            # others', not this rank's, data or work. (A wait before the step's start, in an
            # evaluation that moved it, is cut off.) So are FSDP2's waits for its all-gathers
            # in the forward: a rank ahead waits there for the one behind, as DDP's in its
            # all-reduces. (Read as its forward, the comm column '-', a victim's forward looked
            # as slow as the straggler's own: 35.0 ms beside its 35.5, review 284.)
            wait_s = synced_s = opened.lead_wait_s
            for (phase, a), (_, b) in zip(bounds, bounds[1:]):
                if phase == "eval":
                    continue
                w = CommTimer.seconds(syncs, within=(a, b)) if syncs else 0.0
                g = CommTimer.seconds(gathers, within=(a, b)) if gathers else 0.0
                if w or g:
                    field = _PHASE_FIELD[phase]
                    out[field] = max(0.0, out[field] - w - g)
                    wait_s += w + g
                    synced_s += w
                    if phase in ("data", "forward"):
                        waited += w
            out["comm_s"] = wait_s
        if self.reporter.identity.world_size == 1:
            self_s: float | None = step_s  # one process alone waits for nobody
        elif self._pp is not None:
            # A pipeline's stage: its own work is the step less its waits for its neighbours
            # (the schedule's sends and receives: comm_s) and, a stage sharded by FSDP, for its
            # all-gathers. Its stages compute one after the other, not up to a common
            # collective: there is no arrival to time up to.
            self_s = max(0.0, step_s - synced_s - (CommTimer.seconds(opened.waits, within=(marks[0][1], d.end)) if opened.waits else 0.0))
        elif opened.waits and any(p == "backward" for p, _ in marks):
            # FSDP2: its data and forward (each micro-batch's) less the waits for its
            # all-gathers (a rank slow in a block keeps the others waiting in a later one).
            # Backward passes are left out, as DDP's self time ends at its backward: FSDP
            # gathers again there, in hooks of its own, untimed.
            own = sum(clock.seconds(a, b) for (p, a), (_, b) in zip(bounds, bounds[1:]) if p in ("data", "forward"))
            own += lead - waited
            self_s = max(0.0, own - CommTimer.seconds(opened.waits, within=(marks[0][1], d.end)))
        elif opened.arrive is not None:
            # From the step's start to its arrival, less its waits between steps on the way.
            own = clock.seconds(marks[0][1], opened.arrive) + lead
            if syncs:
                own -= CommTimer.seconds(syncs, within=(marks[0][1], opened.arrive))
            if evaluated:  # (an evaluation before its arrival: a micro-batch under no_sync left over, then it)
                own -= sum(clock.seconds(a, b) for (p, a), (_, b) in zip(bounds, bounds[1:])
                           if p == "eval" and clock.seconds(b, opened.arrive) >= 0)  # fmt: skip
            self_s = max(0.0, own)
        else:
            self_s = None
        if opened.loader_s is not None:
            # (the DataLoader's part of the data phase; a batch asked for in a data phase an
            # evaluation then moved is in no step's data, and a GPU's phases are its stream's)
            out["loader_s"] = min(opened.loader_s, out["data_s"])
        losses = opened.losses
        if len(losses) == 1:  # (sum() of one: 0 + it, so a loss of -0.0 reads 0.0, as ever)
            loss = 0 + float(losses[0].item())
        else:  # (sum() itself: from Python 3.12 it compensates its rounding)
            loss = sum(float(t.item()) for t in losses) if losses else None
        out["step"] = d.step
        out["epoch"] = d.epoch
        out["step_s"] = step_s
        out["self_s"] = self_s
        samples = opened.samples
        ways, place = self._tp_group
        if ways > 1:
            # Tensor parallel: the ranks of one group train on one batch, the same on each, and
            # the run's samples are its ranks' sum: each says its share (it read 3,767 samples/s
            # where the job took ~1,880, twice the batches it trained on; review 276).
            samples = samples * (place + 1) // ways - samples * place // ways
        out["samples"] = samples
        out["loss"] = loss  # NaN goes on: the reporter says the loss is not finite
        out["lr"] = d.lr
        out["mem"] = d.mem
        micro = opened.micro
        if micro > 1 and self._pp is None:  # (a pipeline's stage: its backward passes, one a micro-batch a stage held)
            micro = micro_batches(opened.passes)
        if micro > 1 or self._micro_said:
            self._micro_said = True
            out["custom"] = {"micro_batches": float(micro)}
        if opened.grad_norms or opened.lrs is not None:
            figures = self._norm_figures(opened, d.lr)
            if figures:
                out["custom"] = {**out.get("custom", {}), **figures}
        if d.logged:  # (nothing logged, the common case: nothing to apply)
            d.logged.apply(out)
        if d.t is not None:
            out["t"], out["mono"] = d.t, d.mono
        self.reporter.step(**out)

    def in_step(self) -> bool:
        """Whether a step has begun (a forward, backward or optimizer step since the last)."""
        return self._open is not None and len(self._open.marks) > 1

    @_guarded
    def finish(self, failed: bool = False) -> None:
        """At exit: publish the step still open after its optimizer round, and a held one
        (and say how long a last evaluation took). After a failure, a round that lacks an
        optimizer of the last one (a GAN's crashed between its two steps) is no step."""
        if self._eval_t0:
            self._eval_ends(cut_short=failed)
        if self._logging_to is not None:
            self._next_step_begins()  # (none will: what the script logged after its last step is that step's)
        if failed and self._cut is not None and any(all(o() is not r() for r in self._round) for o in self._last_round):
            self._logged_back(self._cut.logged)
            self._cut = None
        if self._skip_from is not False:
            self._skip_end()
        if not self._stepped and not self._explicit:
            self._hand_finish()  # (iterations by hand: see pardash.trainer.skips)
        if self._round and not self._explicit:
            self._round_ends()
        if self._saves_held:
            self._send_saves()
        if self._late is not None:
            late, self._late = self._late, None
            try:
                self._emit(late)
            except Exception:  # a device in an error state: the step is lost, the exit is not
                pass

    # -- hello, process group ---------------------------------------------------------------------

    @_guarded
    def _send_hello(self) -> None:
        fields = {"source": "auto", "torch_version": str(torch.__version__), **self._hello}
        fields.update(modelfacts.process_group_facts())
        fields.update(self._hello_extra)
        if self._planned_steps:  # (a config the script gave says its own steps first)
            fields["config"] = {"total_steps": self._planned_steps, **(fields.get("config") or {})}
        self.backend = fields.get("backend", self.backend)
        self.reporter.hello(**fields)
        self._hello_sent = True

    def _wrap_init_process_group(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = with_attempt_store(original, args, kwargs)  # (after a torchrun restart)
            result = original(*args, **kwargs)
            if not self._hello_sent:
                # The rank shows as starting (and its heartbeat runs) before its first forward;
                # the first forward sends the full hello with the model.
                self._send_hello()
            return result

        return init_process_group

    def _fail(self, exc: Exception) -> None:
        self.dead = True
        # Module hooks and patches can go now (PyTorch copies its module hook lists before
        # calling them); the optimizer hooks stay, inert, since PyTorch may be iterating them.
        self._unwatch()
        for h in self._gather_handles:
            h.remove()
        self._gather_handles = []
        self._unwatch_saves()
        self._unwatch_pipelining()
        self._unwatch_frameworks()
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched = []
        try:
            self.reporter.event(
                "warning",
                message=f"pardash: automatic instrumentation stopped after an internal error "
                f"({type(exc).__name__}: {exc}); the script runs on, unobserved",
                traceback=traceback.format_exc(),
            )
        except Exception:
            pass


_root_begin = Instrument._root_begin.__wrapped__
_root_end = Instrument._root_end.__wrapped__
_backward_begins = Instrument._backward_begins.__wrapped__
_backward_returns = Instrument._backward_returns.__wrapped__
"""The hot hooks' bodies, unguarded: their callers guard them inline (see hooking._guarded)."""

_instrument: Instrument | None = None


def _in_eval_mode(module: Any) -> bool:
    """Whether ``module``'s forward runs the model in eval mode: its own ``training`` flag, or,
    for a wrapper in eval mode (a module with no parameters of its own whose one child is the
    model it runs: DDP's, ``torch.compile``'s, AveragedModel's), the model's it wraps.
    PyTorch Lightning puts ``trainer.model``, the DDP wrapper, in eval mode for a validation
    (``.eval()``), then sets the LightningModule's modules back to training mode by their
    attribute (``m.training = True``, not ``.train()``): the wrapper stays in eval mode for the
    rest of the run, the model it runs trains. Read by the wrapper's flag, each training
    forward with grad after a validation was a forward in eval mode (see _root_begin), and with
    gradient accumulation (4 micro-batches, the first 3 before any optimizer step) the backward
    after it made the whole validation training (see Evaluations._eval_trained): no ``eval``
    event, its 0.3 s in the next step's data, and a rank validating slower named the
    straggler."""
    while not module.training:
        children = module._modules
        if len(children) != 1 or module._parameters:
            return True
        (module,) = children.values()
        if module is None:
            return True
    return False


def _per_sample_losses(t: torch.Tensor) -> bool:
    """Whether ``t``, sent backward with weights, is per-sample losses: one value a sample, or
    the output of a loss function (its gradient function is a loss's, NllLossBackward0..., or
    one a view or two after it: token losses come out of cross_entropy reshaped)."""
    if t.dim() <= 1:
        return True
    fn = t.grad_fn
    for _ in range(3):
        if fn is None:
            return False
        if "Loss" in type(fn).__name__:
            return True
        fn = fn.next_functions[0][0] if fn.next_functions else None
    return False


def install(reporter: Reporter | None = None) -> Instrument | None:
    """Install the hooks for this process (once), publishing through ``reporter`` (the
    process's reporter by default). None when telemetry is off: then nothing is hooked."""
    global _instrument
    if _instrument is not None:
        return _instrument
    reporter = reporter or api.reporter()
    if not reporter.enabled:
        return None
    _instrument = Instrument(reporter).install()
    return _instrument


def installed() -> Instrument | None:
    return _instrument


__all__ = ["Instrument", "NO_STEP_UNCOUNTED", "NO_STEP_WARNING", "WARN_AFTER_FORWARDS", "install", "installed"]
