"""Where a rank arrives at its step's first collective, the end of its self time, the
straggler signal (part of :class:`pardash.trainer.instrument.Instrument`; DDP's arrival, at
the backward that all-reduces, is marked where that is seen), and the waits that are not its own
work: in collectives between steps, DDP's wait for its all-reduces, its buffer broadcast.

FSDP2 all-gathers each sharded module's parameters in its pre-forward hook (prefetched, then
waited for there): a rank ahead of the others waits in it for the rank behind. A pre-hook
before FSDP's and one after it time that wait; the step's self time leaves it out, and it is
the step's ``comm_s``, out of its forward. In the backward, FSDP's all-gathers again and its
reduce-scatters (``all_gather_single``, ``reduce_scatter_single``) are waits as well, comm out
of the backward. A script
that all-reduces its gradients itself, with no DDP or FSDP wrapper, arrives at its step's first
``all_reduce``.

A pipeline's stage waits for its neighbours in the schedule's sends and receives: see
:mod:`pardash.trainer.pipelines`."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

from pardash.trainer.hooking import DDP_ALL_REDUCE, DDP_BROADCAST, FSDP_ALL_GATHER, FSDP_SAYS, _Hook, _around_fsdp, _get_ident, _guarded, _is_compiling
from pardash.trainer.marks import _Between
from pardash.trainer.trained import FORWARD_ARRIVES

FSDP_COLLECTIVES = ("all_gather_single", "reduce_scatter_single")
"""``torch.distributed``'s collectives FSDP2 calls (a script hardly does): timed in the
backward only (see Arrivals._fsdp_waited)."""

_queue_callback = torch.autograd.Variable._execution_engine.queue_callback


class Arrivals:
    """Arrivals at the step's first collective, and FSDP2's waits. Its state is
    :class:`Instrument`'s (set in its ``__init__``)."""

    def _watch_gathers(self, root: Any) -> None:
        try:
            from torch.distributed.fsdp import FSDPModule
        except ImportError:
            return
        for m in root.modules():
            if isinstance(m, FSDPModule) and m not in self._gathered:
                self._gathered.add(m)
                begin = m.register_forward_pre_hook(_Hook(self._gather_begins), prepend=True)
                end = m.register_forward_pre_hook(_Hook(self._gather_ends))
                self._gather_handles += [begin, end]
                _around_fsdp(m, begin.id, end.id)

    def _gather_begins(self, module: Any, args: Any) -> None:
        if _is_compiling() or self.dead or _get_ident() != self._tid:
            return None
        # A training forward only (not an evaluation's, nor a recomputation in the backward)
        training = self._phase == "forward" and not self._in_backward and not self._eval_t0 and torch.is_grad_enabled()
        self._gather_t = self.clock.stamp() if training and self._open is not None else None
        if self._gather_t is not None:
            # (its heartbeat's phase "sync" while it waits, as in DDP's wait: a rank waiting
            # here for a peer hung in its own forward read "stalled in forward" as that peer did)
            self.reporter.set_phase("sync", FSDP_ALL_GATHER)
        return None

    def _gather_ends(self, module: Any, args: Any) -> None:
        if self._gather_t is None or _is_compiling() or _get_ident() != self._tid:
            return None
        if self._open is not None and not self.dead:
            self._open.waits.append((self._gather_t, self.clock.stamp()))
        self._gather_t = None
        self.reporter.set_phase(self._phase)
        return None

    def _arrived(self) -> bool:
        """Whether the step being measured has reached its first collective."""
        if self._cut is not None or self._orphan is not None:
            return self._arrive_next is not None
        return self._open is not None and self._open.arrive is not None

    def _arrive(self, stamp: Any) -> None:
        """Note the arrival at the step's first collective (after a cut, or an optimizer new
        since the last step: provisionally the next step's)."""
        if self._cut is not None or self._orphan is not None:
            if self._arrive_next is None:
                self._arrive_next = stamp
        elif self._open.arrive is None:
            self._open.arrive = stamp

    def _wrap_collective(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A wrapper for ``torch.distributed.<name>``, a collective the script calls itself (a
        barrier, a metric's all_reduce, a contrastive loss's all_gather), for its rank's self
        time: called between steps (after the optimizer step, before the step's forward), the
        rank waits there for the others, and that wait is left out of its self time and of its
        data time (the step's ``comm_s`` says it), and its heartbeat's phase is "sync" while it
        waits (a hang there reads "stalled in sync" beside the rank it waits for, stalled in its
        own work); called between two micro-batches (after a backward returned, before the next
        pass: PyTorch Lightning broadcasts before every batch), a wait of the same kind (see
        :meth:`_between_passes`); called in the step's forward or backward, or after its last
        backward before the optimizer step, the rank has arrived at its step's first
        collective. DDP's and FSDP's own gradient collectives do not come this way (DDP's
        are in C++; FSDP's arrival is its first all-gather, at the forward's start)."""
        by_hand = name == "all_reduce"
        fsdps = name in FSDP_COLLECTIVES
        says = FSDP_SAYS.get(name, name)

        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            try:
                at = list(inspect.signature(original).parameters).index("async_op")
            except (ValueError, TypeError):
                at = -1  # (no async_op: a barrier's always blocks)

            def collective(*args: Any, **kwargs: Any) -> Any:
                if _get_ident() != self._tid or _is_compiling() or self.dead or self._joined:
                    # (joined: the collectives DDP's Join shadows for the others are no wait
                    # of a step of its own; its heartbeat says "join" throughout, see Joins)
                    return original(*args, **kwargs)
                if self._in_backward and self.strategy == "fsdp" and self._pp is None:
                    if kwargs.get("async_op") or (0 <= at < len(args) and args[at]):
                        return original(*args, **kwargs)
                    start = self.clock.stamp()
                    self.reporter.set_phase("sync", says)
                    try:
                        return original(*args, **kwargs)
                    finally:
                        self._fsdp_waited(start)
                if fsdps:
                    return original(*args, **kwargs)  # (FSDP2's forward: its all-gathers' waits are timed by _watch_gathers)
                if by_hand and (self._by_hand or self.strategy == "single"):
                    self._all_reduce_by_hand()
                if not self._collective_begins():
                    return original(*args, **kwargs)
                if kwargs.get("async_op") or (0 <= at < len(args) and args[at]):
                    out = original(*args, **kwargs)
                    self._sync_work, self._sync_work_name = out, name  # the rank waits in its wait()
                    return out
                start = self._sync_begins(name)
                try:
                    return original(*args, **kwargs)
                finally:
                    self._synced(start)

            return collective

        return wrap

    @_guarded
    def _fsdp_waited(self, start: Any) -> None:
        """FSDP's collective in the backward, from ``start``, returned: its all-gather of a
        module's parameters again (resharded after the forward) or its reduce-scatter of their
        gradients, each blocking on CPU until every rank is there. A rank ahead waits in them
        for the rank behind: the step's ``comm_s``, out of its backward, as DDP's wait for its
        all-reduces (the victim of a rank slow in a block read "bwd 235.9 ms" against the slow
        rank's 72.9). The self time leaves the backward out, as before. Its heartbeat's phase
        is "sync" while it waits (a hang there read "stalled in backward")."""
        self._keep_wait((start, self.clock.stamp()))
        self.reporter.set_phase(self._phase)

    def _wrap_ddp_buffer_sync(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """DDP's ``_sync_buffers``: its broadcast of the model's buffers (BatchNorm's running
        statistics) from rank 0, as its forward begins (``broadcast_buffers=True``, DDP's
        default). A collective: a rank early to it waits there for the rank late (one slow in
        its data). That wait is the step's ``comm_s``, out of its forward time and its self
        time, as a wait in a collective of the script's own; the step's arrival stays the
        backward that all-reduces the gradients, as without buffers.

        Taken for the arrival (the self time ended as the forward began), a rank slow in its
        forward was never named: "stragglers: none", its peer's wait in the backward its
        "comm 27.6 ms"; and a data straggler's peer read its wait as its forward ("fwd 24.8
        ms"). (Review 276, a DDP MLP with BatchNorm1d.)"""

        def timed(ddp: Any, *args: Any, **kwargs: Any) -> Any:
            if _get_ident() != self._tid or _is_compiling() or self.dead or not self._buffer_sync_begins():
                return original(ddp, *args, **kwargs)
            start = self._sync_begins(DDP_BROADCAST)
            try:
                return original(ddp, *args, **kwargs)
            finally:
                self._synced(start)
                self._buffers_synced()

        # torch.compile(DDP(model)): dynamo traces DDP's forward, and this wrapper with it, so
        # none of it ran as the step ran (the broadcast untimed). Called from the trace, the
        # wrapper runs outside it (_disable_dynamo: a graph break, here rather than at the
        # broadcast itself, a pybind function dynamo breaks at anyway), and times it as in eager.
        eager = getattr(torch, "_disable_dynamo", None)
        timed_eagerly = eager(timed) if eager is not None else timed

        def _sync_buffers(ddp: Any, *args: Any, **kwargs: Any) -> Any:
            if _is_compiling():
                return timed_eagerly(ddp, *args, **kwargs)
            return timed(ddp, *args, **kwargs)

        return _sync_buffers

    @_guarded
    def _buffers_synced(self) -> None:
        """DDP's buffer broadcast was timed as a wait: the step's arrival the forward's root
        took for it, where the broadcast might go untimed (see Instrument._root_begin), is
        taken back; the backward that all-reduces arrives."""
        arrive, self._buffer_arrive = self._buffer_arrive, None
        if arrive is None:
            return
        if self._arrive_next is arrive:
            self._arrive_next = None
        elif self._open is not None and self._open.arrive is arrive:
            self._open.arrive = None

    @_guarded
    def _buffer_sync_begins(self) -> bool:
        """Whether DDP's buffer broadcast beginning now is a training forward's (its wait timed):
        not an evaluation's, nor one under no_grad (a GAN's fakes), nor a recomputation."""
        return (self.reporter.identity.world_size > 1 and self._open is not None and self._phase == "forward"
                and not self._in_backward and not self._eval_t0 and torch.is_grad_enabled())  # fmt: skip

    def _wrap_work_wait(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``Work.wait``: the wait for an asynchronous collective called between steps (a
        ``barrier(async_op=True)`` waited on), where the rank waits for the others (what it
        did between the call and its wait() was its own work)."""

        def wait(work: Any, *args: Any, **kwargs: Any) -> Any:
            if work is not self._sync_work or _get_ident() != self._tid:
                if self._pp_in_step and not self._depth and not self._in_backward and _get_ident() == self._tid and not self.dead:
                    # A pipeline schedule's send or receive, waited for between passes: the
                    # stage waits for its neighbour (see Pipelines).
                    start = self._sync_begins()
                    try:
                        return original(work, *args, **kwargs)
                    finally:
                        self._synced(start)
                return original(work, *args, **kwargs)
            self._sync_work = None
            start = self._sync_begins(self._sync_work_name)
            try:
                return original(work, *args, **kwargs)
            finally:
                self._synced(start)

        return wait

    @_guarded
    def _collective_begins(self) -> bool:
        """A collective of the script's own begins: note an arrival in the step's forward or
        backward; True when its wait is to be timed: a collective between steps (before the
        step's forward, or after an optimizer step that may have ended it), or one after a
        backward returned (:meth:`_between_passes`)."""
        if self.reporter.identity.world_size < 2 or self._open is None or (self._in_optimizer and self._closure is None):
            return False
        if self._phase in ("data", "eval") or (self._phase == "optimizer" and (self._cut is not None or self._orphan is not None)):
            return not self._arrived()
        if (self._phase == "backward" and self._backward_end is not None and not self._in_backward and not self._eval_t0
                and not self._hand_after):  # (before any optimizer step, an update by hand's: see pardash.trainer.skips)
            self._between_passes()
            return True
        if self._phase == "forward" and self._ddp_accumulates and not self._in_backward and not self._eval_t0:
            # A micro-batch under DDP's no_sync: the step's arrival is its gradients' all-reduce,
            # in a later backward; a collective in this forward (Lightning's self.log(...,
            # sync_dist=True) in training_step) is a wait. Taken for the arrival, a rank 20 ms
            # slow in each of 4 micro-batches read 22 ms a step behind, the others' waits their
            # forward time (130 ms a step). (In the micro-batch that all-reduces, it is the
            # arrival, as without accumulation: a contrastive loss's all_gather.)
            return True
        if self._phase in ("forward", "backward") and not self._eval_t0 and self.strategy != "fsdp":
            # In the step's forward or backward (a metric's all_reduce in Lightning's
            # training_step, self.log(..., sync_dist=True); a contrastive loss's all_gather):
            # the first is the step's arrival, and the time in each is the rank's wait for the
            # others, its comm, not its forward (the rank waiting for a slow one read "fwd 54.0"
            # against the straggler's 9.8; review 327).
            if not self._arrived():
                self._arrive(self.clock.stamp())
            return True
        return False

    @_guarded
    def _sync_begins(self, waits_in: str = "") -> Any:
        """The rank begins to wait in a collective between steps: its heartbeat says "sync"
        (it read "data", the phase of the rank it waits for, so a hang could not tell them
        apart), and which collective, ``waits_in``, where known. The wait's start stamp."""
        self.reporter.set_phase("sync", waits_in)
        return self.clock.stamp()

    @_guarded
    def _synced(self, start: Any) -> None:
        """The wait in a collective between steps, from ``start``, is over: kept with the step
        it belongs to (after a cut, the next one's unless the round goes on), to leave out of
        its self time and data time. (A sync point that restarted the self time hid a rank
        slow before it, rank 0 writing its logs before every step's barrier, and counted the
        others' wait as their data loading.)"""
        if start is None:
            return
        span = (start, self.clock.stamp())
        between = self._between
        if between is not None and self._after_same_backward(between):
            between.spans.append(span)  # (kept once the next pass begins: see _between_ends)
        else:
            self._keep_wait(span)
        self.reporter.set_phase(self._phase)

    def _between_passes(self) -> None:
        """A collective of the script's own begins after a backward returned, before the next
        pass or the optimizer step: between two micro-batches of the step (gradient
        accumulation), where PyTorch Lightning broadcasts at every batch (whether a SIGTERM
        came), or the step's last one before its optimizer step (gradients reduced by hand).
        Its wait is timed either way; which it was, the next pass tells (:meth:`_between_ends`).
        Meanwhile it is the step's arrival, if the step had none, as before the optimizer step.

        Taken for the arrival, Lightning's broadcast before the second micro-batch ended the
        step's self time after the first of 4 (a rank 20 ms slow in each read "the others wait
        20 ms a step for it", not 80), and the healthy rank's wait in the next three broadcasts
        read as its data loading ("data 69.8 ms", comm 23.2)."""
        between = self._between
        if between is not None and self._after_same_backward(between):
            return  # (a second collective after the same backward)
        arrive = None
        if self.strategy not in FORWARD_ARRIVES and not self._arrived():
            arrive = self.clock.stamp()
            self._arrive(arrive)
        self._between = _Between(self._backward_end, self._posts, arrive)

    def _after_same_backward(self, between: _Between) -> bool:
        """Whether no pass and no optimizer step has begun since ``between``'s collectives (the
        step's phase still the backward it returned from)."""
        return self._phase == "backward" and self._backward_end is between.backward_end and self._posts == between.posts

    def _between_ends(self) -> None:
        """A pass begins (a training forward or backward): collectives called since the last
        backward returned, with no optimizer step since, were between two micro-batches. Their
        waits are the step's ``comm_s``, out of the next micro-batch's data time and its self
        time, and the step's arrival is where its gradients are reduced (DDP: the backward
        outside ``no_sync``), not at them."""
        between, self._between = self._between, None
        if between is None or not self._after_same_backward(between):
            return
        arrive = between.arrive
        if arrive is not None:
            if self._arrive_next is arrive:
                self._arrive_next = None
            elif self._open is not None and self._open.arrive is arrive:
                self._open.arrive = None
        for span in between.spans:
            self._keep_wait(span)

    def _keep_wait(self, span: tuple[Any, Any]) -> None:
        """A wait for the other ranks, kept with the step it belongs to (see :meth:`_synced`)."""
        if self._cut is not None or self._orphan is not None:
            if self._sync_next is None:
                self._sync_next = []
            self._sync_next.append(span)
        elif self._open is not None:
            self._open.syncs.append(span)

    def _watch_ddp_wait(self, tensors: Any) -> None:
        """A backward that all-reduces DDP's gradients begins: have the moment its own work is
        done noted (:meth:`_graph_ends`).

        DDP launches each bucket's all-reduce as the bucket's gradients are ready, and waits for
        them all once the backward's graph has run, in a callback it queues with the autograd
        engine. From there to the backward's return the rank waits: for a peer still in its
        evaluation, its checkpoint or simply behind, and for the last buckets' transfer. That
        wait is the step's ``comm_s`` (as a wait in a collective of the script's own), out of its
        backward; it read as the backward: rank 1's 3.4 s at each of rank 0's evaluations in
        nanoGPT. The engine runs its callbacks in the order queued, and this one is queued at the
        loss's gradient, the graph's first node, before DDP's. (A loss that is a leaf has no
        node to hook: not timed.)"""
        loss = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
        node = loss.grad_fn if isinstance(loss, torch.Tensor) else None
        if node is not None:
            # (a pre-hook on its node: a tensor hook cost twice as much; left on the node,
            # which goes with the graph, and unset after this backward)
            self._graph_watch = self._ddp_backward = True
            node.register_prehook(self._graph_begins)

    def _nested_backward(self, original: Callable[..., Any], tensors: Any, args: Any, kwargs: Any) -> Any:
        """A backward called inside the backward that all-reduces DDP's gradients: a reentrant
        activation checkpoint's (``checkpoint_wrapper(..., REENTRANT)``, ``checkpoint(...,
        use_reentrant=True)``), which recomputes its part of the model and backpropagates
        through it in a graph of its own. DDP's hooks run in that graph, and where its buckets
        are all launched there, DDP waits for them in a callback of that graph, before the
        nested backward returns (the outer graph's callback, :meth:`_graph_ends`, comes after).
        The wait from the nested graph's end to its return is timed as the outer's is: the
        step's ``comm_s``, out of its backward. (A checkpoint around the whole DDP module read
        "comm 0.0", its wait the backward: the victim of a rank slow in its forward "bwd 24.8",
        as if slowest in its backward; review 284.) A nested graph without DDP's wait times
        the callbacks' return alone, microseconds."""
        node = None
        for t in tensors if isinstance(tensors, (list, tuple)) else (tensors,):
            if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                node = t.grad_fn
                break
        if node is None:
            return original(tensors, *args, **kwargs)
        done: list[Any] = []

        def graph_ends() -> None:
            if not self.dead:
                done.append(self.clock.stamp())
                self.reporter.set_phase("sync", DDP_ALL_REDUCE)

        def graph_begins(grads: Any) -> None:
            if not done:
                done.append(None)
                try:
                    _queue_callback(graph_ends)
                except Exception as exc:
                    self._fail(exc)

        node.register_prehook(graph_begins)
        try:
            return original(tensors, *args, **kwargs)
        finally:
            if len(done) == 2 and not self.dead:
                self._nested_waited(done[1])

    @_guarded
    def _nested_waited(self, start: Any) -> None:
        self._keep_wait((start, self.clock.stamp()))
        self.reporter.set_phase(self._phase)

    def _graph_begins(self, grads: Any) -> None:
        """The loss's node runs (the backward's first): queue :meth:`_graph_ends`."""
        if self._graph_watch:
            self._graph_watch = False
            try:
                _queue_callback(self._graph_ends)
            except Exception as exc:
                self._fail(exc)

    @_guarded
    def _graph_ends(self) -> None:
        """The backward's graph has run (an engine callback, before DDP's wait): the rank waits
        from here, its heartbeat's phase "sync" as in a collective of its own."""
        self._graph_done = self.clock.stamp()
        self.reporter.set_phase("sync", DDP_ALL_REDUCE)

    def _ddp_waited(self) -> None:
        """The backward that waited for DDP's all-reduces returned: its wait is the step's."""
        span, self._graph_done = (self._graph_done, self._backward_end), None
        self._keep_wait(span)
        self.reporter.set_phase(self._phase)

    @_guarded
    def _all_reduce_by_hand(self) -> None:
        """A model trained without DDP or FSDP on several ranks whose script all-reduces (its
        gradients, by hand): data parallel all the same. The step's first all_reduce is its
        arrival (self time: its work before it, the straggler signal), and the strategy is ddp
        (a full copy a rank), said in the hello's note; it read "single", with no self time."""
        if self.reporter.identity.world_size < 2 or self._open is None or self._eval_t0 or (self._in_optimizer and self._closure is None):
            return
        if self._phase not in ("forward", "backward"):
            return  # a metric's all_reduce after the step (or in its data), not the gradients'
        if not self._arrived():
            self._arrive(self.clock.stamp())
        if not self._by_hand:
            self._by_hand = True
            self.strategy = "ddp"
            self._hello["strategy"] = "ddp"
            self._hello["note"] = "data parallel by hand: no DDP wrapper, the script all-reduces (torch.distributed.all_reduce)"
            self._send_hello()
