"""The fast engine: a Program compiled once into ready-to-run steps, replayed on the simulator's lanes.

``Replay`` has the interface of the reference ``executor.Executor`` and gives the same bits. What it does
differently, measured on the library kernels (see docs/simulator.md):

- **Bound once.** A workspace holds the buffers of the tensors, inputs and outputs included (inputs are
  copied in, outputs copied out), in one arena laid out by liveness (``simulator.memory``), so every
  operand view is built once. Each instruction becomes a step: its row's ``bind``
  (``simulator.isa.fast``) resolves views, broadcasts, fp32 work arrays and ALU functions at bind time; a
  row without a bind runs its ``execute`` on the bound views. The steps are bound on a Program's first
  call and run until the batched plan replaces them.
- **Fast exact casts** (``simulator.convert``) and one ``np.errstate`` per run instead of one per call.
- **Batched** (``simulator.batching``): independent same-shaped instructions run as one stacked
  operation, shared at run time between two lanes (``simulator.schedule``, ``simulator.threads``); in
  windows when the renamed storage would pass ``NKIHUB_SIM_BATCH_MEMORY``. The plan is made a slice after
  each call, within ``NKIHUB_SIM_PLAN_BUDGET`` (a share) of the call's time, so no call pays all of it,
  and used from the call after it is complete.
- **Memory returned.** After a run, an arena whose pages cost little to fault in again next to the run
  hands them back; what the process keeps between runs (arenas, plans, steps) is capped by
  ``NKIHUB_SIM_KEEP_MEMORY``, least recently used first (``simulator.memory``).

``executor_for`` picks the engine named by ``NKIHUB_SIM_ENGINE`` (``simulator.config``).
"""
from __future__ import annotations

import collections
import contextlib
import gc
import threading
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from nkihub.simulator import config
from nkihub.simulator.batching import Batches, binding, finish, plan_batches, planning
from nkihub.simulator.dataflow import NotBatchable
from nkihub.simulator.errors import SimulationError, is_kernel_error
from nkihub.simulator import executor
from nkihub.simulator.executor import Executor, check_inputs, engine_tables, input_array, strided
from nkihub.simulator.isa import ExecContext, opdef
from nkihub.simulator.isa.fast import NoBind, Scratch, strict_reshape
from nkihub.simulator import memory
from nkihub.simulator.memory import ALIGN, Arena, pack
from nkihub.simulator.program import Program
from nkihub.simulator.threads import run_on_lanes


# Programs shorter than this replay unbatched: planning would cost more than it saves.
BATCH_MIN_INSTRUCTIONS = 32
# Memory a bound step and a batched plan's bookkeeping per instruction hold (Python objects, numpy and
# torch views; measured on the matmul tutorial at 8192 x 4096 x 8192: 0.08-0.1 GB of steps, 0.07 GB of
# plan for 39680 instructions), for what the process keeps between runs (``memory.done``).
STEP_BYTES = 2560
PREFAULT_BYTES = 16 << 20     # pages faulted in per slice of ``_Workspace.prefault``
PLAN_BYTES = 2048
# A plan of this many instructions or more is followed by a full pass of the cyclic collector in the call
# that completes it. Its objects (about 50 tracked per instruction: the steps' closures, the plan's tables)
# are moved to the oldest generation uncounted (``_promoted``), so the collector's next full pass comes a
# few calls later, when what those calls leave behind passes a quarter of what its last full pass kept, and
# traverses them all (1.4 CPU s at vit-block 64 images, 48385 instructions: half a batched run), finding
# nothing. Made here, it is paid once by the planning calls, and the full pass after it waits for a quarter
# of the plan's objects.
FULL_PASS_INSTRUCTIONS = 8192
# Runs a completed batched plan is tried for against the unbatched steps that ran before it (the best of
# each, wall time of the run): batching is kept only when it is faster (``Replay._judge``).
TRIAL_RUNS = 3


@contextlib.contextmanager
def _gc_paused():
    """Planning and binding allocate hundreds of thousands of small objects that all stay alive, so
    the cyclic collector's passes find nothing and cost about half of binding (vit-attn: 0.21 -> 0.09 s
    unbatched); pause it meanwhile (leaving it off if someone else turned it off). On leaving, the
    objects made meanwhile go straight to the oldest generation (``_promoted``)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        _promoted()
        if was:
            gc.enable()


def _promoted() -> None:
    """Move every object the collector tracks to its oldest generation without counting them as new
    long-lived objects: ``gc.freeze()`` then ``gc.unfreeze()`` (two list splices, nothing stays frozen).
    Counted, the bound steps and the half-made plan kept between calls passed the collector's rule for
    a full pass (new long-lived objects over a quarter of those the last full pass kept) and cost a call
    one full collection of the process (0.15-0.34 s at flash-attn S 2048-4096); young passes also
    scanned them first. Garbage among them is still found by the next full pass, made as before by the
    process's other allocations. Left alone when the process keeps frozen objects of its own."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def generic_step(execute, ins, src: dict, dst: dict):
    """A step running a row's ``execute`` on stacked operands, one instruction at a time."""
    k = next(iter((*dst.values(), *src.values()))).shape[0] if (src or dst) else 1
    if k == 1:
        s1 = {r: v[0] for r, v in src.items()}
        d1 = {r: v[0] for r, v in dst.items()}
        return lambda ctx: execute(ins, s1, d1, ctx)
    per = [({r: v[i] for r, v in src.items()}, {r: v[i] for r, v in dst.items()}) for i in range(k)]

    def step(ctx):
        for s, d in per:
            execute(ins, s, d, ctx)
    return step


def rows_step(execute, ins, src: dict, dst: dict):
    """A step running a ``rows`` row's ``execute`` once on ``k`` stacked instructions seen as one, their
    partitions end to end (None unless every operand has the destination's partitions and its stack
    merges into them without a copy)."""
    arrays = (*dst.values(), *src.values())
    if not dst or arrays[0].shape[0] == 1 or arrays[0].ndim < 3:
        return None
    p = arrays[0].shape[1]
    try:
        s1, d1 = ({r: _merged(v, p) for r, v in side.items()} for side in (src, dst))
    except NoBind:
        return None
    return lambda ctx: execute(ins, s1, d1, ctx)


def _merged(a: np.ndarray, p: int) -> np.ndarray:
    if a.ndim < 3 or a.shape[1] != p:
        raise NoBind("an operand with other partitions")
    return strict_reshape(a, (a.shape[0] * p, *a.shape[2:]))


def bind_step(ins, src: dict, dst: dict, scratch: Scratch):
    """The step of one instruction (or of ``k`` stacked ones): its row's bind, else its execute (once
    over the stack for a ``rows`` row, else once per instruction)."""
    row = opdef(ins.opcode)
    step = None
    if row.bind is not None:
        try:
            step = row.bind(ins, src, dst, scratch)
        except NoBind:
            step = None
    if step is None and row.rows:
        step = rows_step(row.execute, ins, src, dst)
    return step or generic_step(row.execute, ins, src, dst)


def run_steps(steps, instructions, ctx) -> None:
    """Run bound steps in order; an exception that is not a kernel error names the instruction."""
    i = 0
    try:
        for i, step in enumerate(steps):
            step(ctx)
    except Exception as exc:  # a simulator defect or an unchecked rule: say where
        if is_kernel_error(exc):
            raise
        ins = instructions[i]
        raise SimulationError(f"{ins.opcode} failed in the simulator: {exc}", loc=ins.loc) from exc


def run_batched(steps, ctx) -> None:
    """Run a batched plan's steps on one lane (its errors are located by the unbatched replay)."""
    for step in steps:
        step(ctx)


class _Workspace:
    """Buffers of one Program's tensors in one arena (``simulator.memory``, laid out by ``_Layout``) and
    the steps bound to them (one per instruction, or one per group of ``batches``)."""

    def __init__(self, rp: "Replay", batches: Batches | None = None, lanes: int = 1, defer: bool = False):
        lay = rp._layout(batches)
        self.arena = Arena(lay.kept, lay.released)
        self.bufs = [None] * len(rp._specs)
        for i, (kept, offset) in lay.regions.items():
            self.bufs[i] = self.arena.array(offset, rp._specs[i].size, rp._dtypes[i], kept)
        for i, root in rp._aliases.items():     # dtype reinterpretations see their root's bytes
            if self.bufs[root] is not None:
                self.bufs[i] = self.bufs[root].view(rp._dtypes[i])
        for i in lay.filled:
            self.bufs[i].fill(rp._fills[i])
        self._load_constants(rp)
        if not rp.checked:
            self.refill(rp)
        self.scratch = self._scratch(rp)
        self.batches, self.lanes = batches, lanes
        self.runs = 0           # runs made on it
        self.step_bytes = 0     # estimated memory of the bound steps
        if batches is not None:
            self._storage_offset = lay.storage_offset
            self.schedule = self.steps = None
            if not defer:
                finish(self.bind_plan(rp))
            return
        self.lanes = 1
        self.steps, self.where = None, rp.program.instructions
        self.bind(rp)

    def bind_plan(self, rp: "Replay"):
        """Bind the batched plan's steps to this workspace, a level at a time (a generator yielding after
        each level; ``defer`` made the workspace unbound)."""
        def storage(dtype):
            return self.arena.typed(dtype)[self._storage_offset // np.dtype(dtype).itemsize:]
        self.scratches = [self.scratch] + [self._scratch(rp) for _ in range(self.lanes - 1)]
        self.schedule = yield from binding(self.batches, self.bufs, rp._index, storage, self.scratches, bind_step)
        self.steps = self.schedule.steps() if self.lanes == 1 else None
        self.step_bytes = STEP_BYTES * self.schedule.bound

    def _scratch(self, rp: "Replay") -> Scratch:
        """A lane's work arrays, told which buffers stay unchanged during a run (``rp._stable``)."""
        sc = Scratch()
        sc.stable([self.bufs[i] for i in rp._stable if self.bufs[i] is not None])
        return sc

    def prefault(self):
        """Fault in the pages the batched plan's first run writes, a slice at a time (a generator): the
        arena's released part (storage and buffers: a fresh mapping reads as zeros, so writing zeros
        changes nothing) and the work arrays binding made. Else the first batched run pays them, up to
        twice a run (flash-attn at S 2048)."""
        arrays = [self.arena.typed(np.uint8)] + [a.view(np.uint8) for sc in self.scratches for a in sc.arrays()]
        for a in arrays:
            for i in range(0, a.size, PREFAULT_BYTES):
                a[i:i + PREFAULT_BYTES:memory.PAGE] = 0
                yield

    def bind(self, rp: "Replay") -> None:
        """Bind one step per instruction (unbatched)."""
        steps = []
        for ins in rp.program.instructions:
            src = {r: self.view(rp, ap)[None] for r, ap in ins.src.items()}
            dst = {r: self.view(rp, ap)[None] for r, ap in ins.dst.items()}
            steps.append(bind_step(ins, src, dst, self.scratch))
        self.steps, self.step_bytes = steps, STEP_BYTES * len(steps)

    def view(self, rp: "Replay", ap, writeable: bool = True) -> np.ndarray:
        """The view of access pattern ``ap`` in its tensor's buffer (``ndarray`` over the buffer: a third
        of ``executor.strided``'s cost, which binding pays per operand; that one where numpy refuses)."""
        i = rp._index[ap.tensor]
        buf = self.bufs[i]
        item = buf.itemsize
        strides = tuple(s * item for s, _ in ap.dims)
        try:
            v = np.ndarray(ap.shape, buf.dtype, buf, ap.offset * item, strides)
        except (TypeError, ValueError):
            return strided(buf, ap.offset, ap.shape, strides, writeable)
        if not writeable:
            v.flags.writeable = False
        return v

    def _load_constants(self, rp: "Replay") -> None:
        for i, spec in enumerate(rp._specs):
            if spec.kind == "constant" and self.bufs[i] is not None:
                self.bufs[i][...] = np.frombuffer(spec.data, dtype=rp._dtypes[i])

    def refill(self, rp: "Replay") -> None:
        for i, buf in enumerate(self.bufs):
            if buf is not None and rp._specs[i].kind != "input" and i not in rp._aliases:
                buf.fill(rp._fills[i])
        self._load_constants(rp)

    def refill_outputs(self, rp: "Replay") -> None:
        """Give the outputs what a fresh buffer holds (``executor.fill_value``), as the reference engine's
        fresh outputs do: elements a kernel never writes read the same from both engines and every call
        (a pooled workspace held the last run's values, a new arena zeros): outputs of multi-rank launches, whose
        ranks may each write a part."""
        for i in rp._outputs:
            if self.bufs[i] is not None and rp._specs[i].kind != "input" and i not in rp._aliases:
                self.bufs[i].fill(rp._fills[i])

    def load(self, rp: "Replay", inputs) -> None:
        for sc in getattr(self, "scratches", None) or [self.scratch]:
            sc.forget()     # the inputs change: what work arrays widened from them is stale
        for i, arr in zip(rp._inputs, inputs):
            spec = rp._specs[i]
            arr = input_array(spec, arr)
            np.copyto(self.bufs[i].reshape(spec.shape), arr, casting="unsafe")

    def outputs(self, rp: "Replay") -> list[np.ndarray]:
        return [self.bufs[i].reshape(rp._specs[i].shape).copy() for i in rp._outputs]


@dataclass
class _Layout:
    """Where a workspace's buffers live in its arena: ``regions`` (tensor index -> (in the kept part, byte
    offset)), the sizes of the kept and released parts, the byte offset of a batched plan's storage in the
    released part, and the tensors whose buffers are filled once when the workspace is made."""

    regions: dict
    kept: int
    released: int
    storage_offset: int = 0
    filled: list = field(default_factory=list)


def layout(rp: "Replay", batches: Batches | None) -> _Layout:
    """The arena layout of ``rp``'s workspaces, unbatched or for ``batches``.

    HBM tensors and the tiles the host sees live for the whole run. Unbatched, the other tensors of a
    checked Program live from the first to the last instruction touching them and share bytes by
    liveness (``memory.pack``): a checked Program reads no element before the run wrote it (what a
    recycled buffer held is never seen, as with a pooled workspace), so on-chip memory follows what is live
    at once, which SBUF and PSUM bound. Batched, renamed tiles are never written in their buffers (writes
    go to the plan's storage): only those whose initial contents are read get one, and those share one
    buffer per dtype, filled once with the fill value. Constants and those buffers sit in the kept part.
    """
    program, specs = rp.program, rp._specs
    root = lambda name: rp._aliases.get(rp._index[name], rp._index[name])  # noqa: E731
    first, last = {}, {}
    for t, ins in enumerate(program.instructions):
        for ap in (*ins.dst.values(), *ins.src.values()):
            i = root(ap.tensor)
            first.setdefault(i, t)
            last[i] = t
    forever = len(program.instructions)
    for i in (*rp._inputs, *rp._outputs):
        first[rp._aliases.get(i, i)], last[rp._aliases.get(i, i)] = -1, forever
    regions, items, keys, kept, filled = {}, [], [], 0, []
    fills: dict = {}        # dtype -> (offset, elements) of the shared buffer of unwritten renamed tiles
    renamed = batches.dataflow.renamed if batches is not None else ()
    for i in sorted(first):
        spec = specs[i]
        if spec.kind == "constant":
            regions[i] = (True, kept)
            kept += -(-spec.size * rp._dtypes[i].itemsize // ALIGN) * ALIGN
        elif spec.name in renamed:
            if spec.name in batches.init_read:
                off, n = fills.get(rp._dtypes[i], (None, 0))
                fills[rp._dtypes[i]] = (off, max(n, spec.size))
        else:
            pooled = batches is None and rp.checked and spec.kind == "internal" and i not in rp._outputs
            items.append((first[i], last[i], spec.size * rp._dtypes[i].itemsize) if pooled else
                         (-1, forever, spec.size * rp._dtypes[i].itemsize))
            keys.append(i)
    for dtype, (_, n) in fills.items():
        fills[dtype] = (kept, n)
        kept += -(-n * dtype.itemsize // ALIGN) * ALIGN
    for i in first:
        if specs[i].name in renamed and specs[i].name in batches.init_read:
            regions[i] = (True, fills[rp._dtypes[i]][0])
            filled.append(i)
    offsets, total = pack(items)
    regions.update({i: (False, off) for i, off in zip(keys, offsets)})
    storage = batches.storage_bytes if batches is not None else 0
    return _Layout(regions, kept, total + storage, total, filled)


def _note(batches: Batches) -> str:
    return "batched" if batches.dataflow.windows == 1 else f"batched in {batches.dataflow.windows} windows"


ON_TRIAL = ", on trial against the unbatched steps"


class Replay:
    """Runs one Program on the fast engine. Build once, call :meth:`run` many times (thread-safe).

    ``checked``: the Program passed ``simulator.validate`` (no read of unwritten memory), so pooled
    buffers need no NaN refill between runs. ``batch``: None batches as ``NKIHUB_SIM_BATCH`` says
    (programs of ``BATCH_MIN_INSTRUCTIONS`` or more, once the plan is made: a slice after each call,
    within ``NKIHUB_SIM_PLAN_BUDGET`` of the call's time); True batches from the first call whatever the
    size; False never. ``batch_note`` says what happened.
    """

    def __init__(self, program: Program, target=None, *, checked: bool = False, batch: bool | None = None):
        engine_tables(self, program, target, checked)
        self.batch = batch
        for ins in program.instructions:
            opdef(ins.opcode)   # an unknown opcode fails here, not in the middle of a run
        self._pool: list[_Workspace] = []
        self._lock = threading.Lock()
        self._calls = 0
        self._reference = None
        self._batches: Batches | None | bool = None    # False: tried and not batchable
        self._planner = None        # the batched plan being made across calls (a generator, ``_planning``)
        self._plan_debt = 0.0       # seconds of planning past the budgets so far (``_advance``)
        self._plan_lock = threading.Lock()
        self.batch_note = "not tried yet"
        self._lay = (None, None)     # (batches or None, its _Layout)
        # inputs no instruction writes (nor through an alias): unchanged during a run (``Scratch.stable``)
        written = {self._aliases.get(self._index[ap.tensor], self._index[ap.tensor])
                   for ins in program.instructions for ap in ins.dst.values()}
        self._stable = [i for i in self._inputs if i not in written and i not in self._aliases
                        and i not in self._aliases.values()]
        self.busy = 0                # runs in progress (``simulator.memory``)
        # wall seconds of the last unbatched runs that bound nothing, and of the batched runs on trial
        # against them (None: no trial on); see ``_judge``
        self._unbatched_s: collections.deque = collections.deque(maxlen=TRIAL_RUNS)
        self._trial: list | None = None

    @property
    def settling(self) -> bool:
        """The batched plan is being made (a slice after each call) or tried against the bound steps: the
        calls have not reached the replay this engine settles on."""
        return self._planner is not None or self._trial is not None

    def held_bytes(self) -> int:
        """Estimated memory of the plan and bound steps this engine keeps between runs."""
        plan = PLAN_BYTES * len(self.program.instructions) if self._batches or self._planner else 0
        return plan + sum(ws.step_bytes for ws in self._pool)

    def shed(self) -> bool:
        """Drop the plan and the workspaces (``simulator.memory`` asks when the process keeps too much
        between runs): the next call plans and binds again. False when busy."""
        if not self._lock.acquire(blocking=False):
            return False
        planning = self._plan_lock.acquire(blocking=False)
        try:
            if self.busy or not planning:
                return False
            if self._planner is not None:
                self._planner, self.batch_note = None, "plan dropped to free memory; planned again from the next call"
            self._pool.clear()
            self._lay = (None, None)
            self._trial = None
            if self._batches:
                self._batches, self.batch_note = None, "plan dropped to free memory; planned again on the next call"
            return True
        finally:
            if planning:
                self._plan_lock.release()
            self._lock.release()

    def _layout(self, batches: Batches | None) -> _Layout:
        with self._lock:
            if self._lay[1] is None or self._lay[0] is not batches:
                self._lay = (batches, layout(self, batches))
            return self._lay[1]

    def _mode(self) -> str:
        return {None: config.batching(), True: "always", False: "never"}[self.batch]

    def _batched(self) -> Batches | None:
        """The batched schedule: planned before the first call with ``always``; else made by ``_advance``
        a slice after each call, and None until it is complete."""
        mode = self._mode()
        if mode == "never":
            return None
        if self._batches is None and mode == "always":
            self._pool.clear()     # the unbatched workspaces' steps: not kept alive while planning
            try:
                with _gc_paused():
                    self._batches = plan_batches(self.program, config.batch_memory())
                self.batch_note = _note(self._batches)
            except NotBatchable as exc:
                self._batches, self.batch_note = False, f"not batched: {exc}"
        return self._batches or None

    def _advance(self, seconds: float, bound: bool = False) -> None:
        """Spend up to ``seconds`` (of the calling thread, after a run) making the batched plan of a
        Program batched from its plan's completion on (``NKIHUB_SIM_BATCH=1``): planning and binding
        (``_planning``) cost 2-3 runs of the reference engine, so one call paying them all would be the
        one call behind it; in slices of a share of each run they are paid back by the runs' lead.

        A slice is the work between two yields of the planner, so the last slice of a call may pass its
        budget: what it passed is a debt the next calls' budgets pay first (so over any calls the plan
        takes at most the budget's share of them, plus one slice). ``bound``: this call bound the steps
        it ran (its workspace was made), which costs about the lead of the bound steps over the
        reference's first call, so it plans nothing, unless the budget is unbounded."""
        if self._batches is not None or self._mode() != "auto" or not self._plan_lock.acquire(blocking=False):
            return
        try:
            if self._batches is not None:
                return
            if len(self.program.instructions) < BATCH_MIN_INSTRUCTIONS:
                with self._lock:
                    self._batches, self.batch_note = False, "too few instructions to pay for planning"
                return
            if self._planner is None:
                self._planner, self.batch_note = self._planning(max(1, config.fast_threads())), "planning"
            if bound and seconds != float("inf"):
                return
            budget = seconds - self._plan_debt
            if budget <= 0:
                self._plan_debt = -budget
                return
            planner, start = self._planner, time.perf_counter()
            deadline = start + budget
            try:
                with _gc_paused():
                    while time.perf_counter() < deadline:
                        next(planner)
            finally:
                self._plan_debt = max(0.0, time.perf_counter() - start - budget)
        except StopIteration:
            self._planner = None
            if self._batches and len(self.program.instructions) >= FULL_PASS_INSTRUCTIONS and gc.isenabled():
                gc.collect()    # the collector's full pass over the plan, now rather than in a batched run
        except Exception as exc:    # a defect of the planner must not cost the user the run's result
            self._planner = None
            with self._lock:
                self._batches, self.batch_note = False, f"planning failed ({exc!r}); replaying unbatched"
            warnings.warn(f"{self.program.name}: {self.batch_note}", RuntimeWarning, stacklevel=3)
        finally:
            self._plan_lock.release()

    def _planning(self, lanes: int):
        """Plan the batched schedule (``batching.planning``), then bind it to a workspace for ``lanes``
        lanes, yielding between slices; at the end the plan and its workspace replace the unbatched steps."""
        try:
            batches = yield from planning(self.program, config.batch_memory())
        except NotBatchable as exc:
            with self._lock:
                self._batches, self.batch_note = False, f"not batched: {exc}"
            return
        yield
        ws = _Workspace(self, batches, lanes, defer=True)
        yield
        yield from ws.bind_plan(self)
        yield from ws.prefault()
        with self._lock:
            self._batches = batches
            self.batch_note = _note(batches)
            if self._unbatched_s:
                self._trial, self.batch_note = [], self.batch_note + ON_TRIAL
            self._pool.append(ws)

    def _judge(self, ws: _Workspace, seconds: float, bound: bool) -> None:
        """Weigh a run of ``seconds`` (wall) on ``ws`` (called holding ``_lock``, ``ws`` back in the pool).

        A batched plan pays on most Programs, not on all: at small sizes its runs can be slower than the
        unbatched steps (vit-block at 1-4 images, load ~6: batched 0.77-0.94x the reference's speed in
        wall time, the unbatched steps 1.10-1.26x), and on a busy machine its two lanes may wait for a core. So the plan made after the calls (``_advance``) is tried: its first
        ``TRIAL_RUNS`` runs against the last ``TRIAL_RUNS`` unbatched runs that bound nothing, the best of
        each. Batching is kept only when faster; else the plan and its workspace are dropped and the
        Program replays unbatched from then on (``batch_note`` says so, with both times). Meanwhile the
        unbatched workspace stays in the pool, so falling back binds nothing. A plan made before the first
        call (``NKIHUB_SIM_BATCH=always``, or by the call that bound with an unbounded budget) has no
        unbatched runs to be weighed against and is kept."""
        if ws.batches is None:
            if not bound and self._batches is None:
                self._unbatched_s.append(seconds)
            return
        if self._trial is None or ws.batches is not self._batches:
            return
        self._trial.append(seconds)
        if len(self._trial) < TRIAL_RUNS:
            return
        batched, unbatched = min(self._trial), min(self._unbatched_s)
        self._trial = None
        if batched < unbatched:
            self.batch_note = _note(self._batches)
            self._pool = [w for w in self._pool if w.batches is not None]
        else:
            self._batches, self._lay = False, (None, None)
            self.batch_note = (f"not batched: its best run of {TRIAL_RUNS} took {batched * 1e3:.4g} ms, the "
                               f"unbatched steps' {unbatched * 1e3:.4g} ms")
            self._pool = [w for w in self._pool if w.batches is None]

    def _take(self) -> _Workspace:
        lanes = max(1, config.fast_threads())
        with self._lock:
            self._calls += 1
            batches = self._batched()
            # workspaces made before batching was planned, or for another number of lanes, are dropped
            # (the unbatched ones kept while the plan is on trial, ``_judge``)
            fitting = [w for w in self._pool if w.batches is batches and (batches is None or w.lanes == lanes)]
            trying = batches is not None and self._trial is not None
            kept = [w for w in self._pool if w.batches is None] if trying else []
            ws, self._pool = (fitting[-1], kept + fitting[:-1]) if fitting else (None, kept)
        if ws is not None and not self.checked:
            ws.refill(self)
        if ws is None:
            with _gc_paused():
                ws = _Workspace(self, batches, lanes)
        memory.take(ws.arena, self)
        if self.checked and self.program.meta.get("ranks"):
            # one rank's kernel must write its outputs whole (output-not-written), ranks together need not;
            # an unchecked workspace was refilled whole
            ws.refill_outputs(self)
        return ws

    def run(self, inputs, *, echo_prints: bool = True, ctx: ExecContext | None = None) -> list[np.ndarray]:
        """Run with ``inputs`` (arrays in the Program's input order); return the outputs as numpy arrays
        of their declared shapes and dtypes."""
        check_inputs(self.program, inputs)
        fresh = ctx is None
        ctx = ctx or ExecContext(self.target, echo=echo_prints)
        start = time.perf_counter()
        ws = self._take()
        bound = not ws.runs     # this call made the workspace and bound its steps
        t0 = time.perf_counter()
        ran = None              # seconds of a run that succeeded on the workspace first taken
        try:
            outs = self._run(ws, inputs, ctx)
            ran = time.perf_counter() - t0
        except Exception as exc:
            if ws.batches is None:
                raise
            # Replay instruction by instruction: it locates a kernel error precisely, and a defect of
            # the batched plan must not cost the user a result (then it is reported as a warning).
            memory.put_back(ws.arena, 0.0, config.keep_memory(), self)
            ws = None
            with self._lock:
                self._batches, self.batch_note = False, f"batched replay failed ({exc!r}); replaying unbatched"
                self._pool.clear()
                self._trial = None
            ctx = ExecContext(self.target, echo=echo_prints) if fresh else ctx
            ws = self._take()
            outs = self._run(ws, inputs, ctx)
            warnings.warn(f"{self.program.name}: {self.batch_note}", RuntimeWarning, stacklevel=2)
        finally:
            if ws is not None:
                ws.runs += 1
                memory.put_back(ws.arena, time.perf_counter() - t0, config.keep_memory(), self)
                with self._lock:
                    self._pool.append(ws)
                    if ran is not None:
                        self._judge(ws, ran, bound)
        self._advance(config.plan_budget() * (time.perf_counter() - start), bound)
        if config.crosscheck():
            self._crosscheck(inputs, outs, ctx, echo_prints)
        self.last_context = ctx
        return outs

    def _crosscheck(self, inputs, outs, ctx, echo_prints) -> None:
        """Raise unless the reference executor gives the same bits (and printed lines) as this run. The
        reference runs on one BLAS thread, as each lane of this engine does: ``NKIHUB_SIM_THREADS`` counts
        this engine's lanes, and a reference given two BLAS threads may sum a gemm in another order."""
        if self._reference is None:
            self._reference = Executor(self.program, self.target, checked=self.checked)
        with executor.blas_pinned(1):
            want = self._reference.run(inputs, echo_prints=False)
        for name, got, ref in zip(self.program.outputs, outs, want):
            a, b = np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(ref).view(np.uint8)
            if a.shape != b.shape or not np.array_equal(a, b):
                bad = int(np.count_nonzero(np.ascontiguousarray(got) != np.ascontiguousarray(ref)))
                raise SimulationError(f"{self.program.name}: the fast engine ({self.batch_note}) differs from the "
                                      f"reference executor in output '{name}' ({bad} elements differ)")
        if self._reference.last_context.printed != ctx.printed:
            raise SimulationError(f"{self.program.name}: the fast engine printed other lines than the reference")

    def _run(self, ws: _Workspace, inputs, ctx) -> list[np.ndarray]:
        ws.load(self, inputs)
        if ws.batches is not None and ws.lanes > 1:
            run = ws.schedule.start()
            tasks = [lambda lane=lane: ws.schedule.run_lane(lane, run, ctx) for lane in range(ws.lanes)]
        elif ws.batches is not None:
            tasks = [lambda: run_batched(ws.steps, ctx)]
        else:
            tasks = [lambda: run_steps(ws.steps, ws.where, ctx)]
        if config.fast_threads() == 0:     # the calling thread, thread pools as they are
            with executor.blas_pinned(0), np.errstate(all="ignore"):
                tasks[0]()
        else:
            with executor.blas_pinned(1):
                run_on_lanes(tasks)
        return ws.outputs(self)


def executor_for(program: Program, target=None, *, checked: bool = False):
    """The engine ``NKIHUB_SIM_ENGINE`` selects for ``program``: a :class:`Replay` (``fast``, the
    default) or the reference :class:`~simulator.executor.Executor`; both have ``run(inputs)``."""
    if config.engine() == "reference":
        return Executor(program, target, checked=checked)
    return Replay(program, target, checked=checked)
