"""Per-parameter gradient digests: what each mode's backward computed, parameter by parameter, at
chosen steps, so `compare` can say whether eager, aot and ca trained the same model.

A digest of one gradient is three numbers computed on the gradient's own device: its L2 norm, its
max-abs (the inf-norm) and an order-sensitive checksum, sum_i g_i * w_i with position weights
w_i = 1 + (i mod CHECKSUM_PERIOD) / CHECKSUM_PERIOD (in [1, 2): a sign flip flips the checksum; a
transposed or permuted gradient usually moves it although its norms stay). CHECKSUM_PERIOD is prime,
so rows of a power-of-two width do not line up with the weights' period.

When: in the optimizer's step pre-hook (the gradients are complete, accumulation included, and not
yet consumed); where step() is given a closure (Lightning's automatic optimization, LBFGS) the
forward and backward run inside step(), in the closure, so its post-hook digests them instead
(after the update: the optimizers of torch.optim read the gradients without changing them). At
step 0, at every step in which a CA graph was captured or Dynamo compiled, every `every` steps
(`cagtool run --parity-every K`), at the steps an earlier mode of the run digested (so later modes
digest what earlier ones did), and at the end of the run for the last step when its gradients are
still held; where the last step was digested during the run, its gradients are digested again at the
end, and the digest says whether they were the same then (REASON_SAME_AT_END: it then stands for the
run's end too, and compares with a mode that digested that step only there). A step without an
optimizer (backward-only: while none is alive each top-level backward is a step, accumulation
included, tracker.py) is digested at the same steps where its backward returns, from the parameters
its graph accumulated gradients into (`after_backward`).

Cost: the hook's usual path is one decrement and one comparison (`countdown`; the backward's hook
looks only while no optimizer is alive, so a job with one pays nothing more); a due step launches
two foreach norms and one matrix-vector product per parameter, and stacks the results into one
small tensor per (device, dtype): nothing is read back until the end of the run (`events`), so the
device is never waited for during training.

Names are module paths (`encoder.layers.3.attn.q_proj.weight`), known from torch's global
module/parameter registration hooks, so a model built, wrapped (DDP's `module.`) or compiled
(`_orig_mod.`, dropped: a module compiled in place has none) is named the same in every mode. A parameter's
name is looked up when it is first digested and kept: a script may rebind or free its model before
the run's end (word_language_model reloads its best model to test it). A tensor no live module holds
then is named by its place: `<optimizer tensor N>` when an optimizer stepped it (a sharded
optimizer's flat partition), `<unnamed tensor N>` otherwise.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Iterable

from cagtool.capture.outside_modes import outside_user_modes
from cagtool.capture.steps.sharded import is_shard, local_part, readable
from cagtool.record.schema import (
    OPTIMIZER_TENSOR_PREFIX,
    REASON_EARLIER_MODE,
    REASON_EVERY,
    REASON_FIRST,
    REASON_LAST,
    REASON_RECOMPILE,
    REASON_SAME_AT_END,
    UNNAMED_TENSOR_PREFIX,
)

# Prime: see the module docstring.
CHECKSUM_PERIOD = 1021
# Segments torch's wrappers add that differ between modes (torch.compile's OptimizedModule); DDP's
# `module.` is the same in every mode and stays.
_DROPPED_SEGMENTS = frozenset({"_orig_mod"})
NEVER = 1 << 62



class ParamNames:
    """Module paths of parameters, from torch's global registration hooks (installed before the
    script runs, so every module the script builds is seen). Weak: holds no module or parameter."""

    def __init__(self) -> None:
        # id -> (weak ref of the object, [(weak ref of the owning module, attribute name)])
        self._param_owners: dict[int, tuple[Any, list[tuple[Any, str]]]] = {}
        self._module_parents: dict[int, tuple[Any, list[tuple[Any, str]]]] = {}
        self._handles: list[Any] = []
        self._lock = threading.Lock()
        self._placed: dict[int, tuple[Any, list[tuple[Any, str]]]] | None = None  # _placed_directly's index

    def install(self) -> None:
        from torch.nn.modules.module import register_module_module_registration_hook, register_module_parameter_registration_hook

        self._handles = [
            register_module_parameter_registration_hook(self._on_parameter),
            register_module_module_registration_hook(self._on_module),
        ]

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _note(self, table: dict[int, tuple[Any, list[tuple[Any, str]]]], owner: Any, name: str, value: Any) -> None:
        try:
            if value is None:
                return
            with self._lock:
                entry = table.get(id(value))
                if entry is None or entry[0]() is not value:
                    # A collected one's entry at this id gives way, and its place in the order too
                    # (registration_order): this one is registered now.
                    table.pop(id(value), None)
                    entry = (weakref.ref(value), [])
                    table[id(value)] = entry
                entry[1].append((weakref.ref(owner), name))
        except Exception:  # noqa: BLE001 - the recorder never fails the script's model building
            pass

    def _on_parameter(self, module: Any, name: str, param: Any) -> None:
        self._note(self._param_owners, module, name, param)
        return None  # a hook's non-None result would replace the parameter

    def _on_module(self, module: Any, name: str, submodule: Any) -> None:
        self._note(self._module_parents, module, name, submodule)
        return None

    def _prefixes(self, module: Any, depth: int = 0) -> list[list[str]]:
        """Every path from a root module (one no live module holds) down to `module`."""
        entry = self._module_parents.get(id(module))
        parents = []
        if entry is not None and entry[0]() is module and depth < 64:
            for ref, attr in entry[1]:
                parent = ref()
                if parent is not None and _still_holds(parent, attr, module):
                    parents.append((parent, attr))
        if not parents:
            return [[]]
        return [prefix + [attr] for parent, attr in parents for prefix in self._prefixes(parent, depth + 1)]

    def _placed_directly(self, param: Any) -> tuple[Any, list[tuple[Any, str]]] | None:
        """`param`'s owners where no registration hook saw it: a library put it into a known
        module's `_parameters` itself (FSDP2's fully_shard puts each parameter's DTensor there), or
        it belongs to a module under a known one that `copy.deepcopy` made (nn.TransformerEncoder's
        layers are deep copies of the layer it is given: a copy's attributes are set without
        registering them). The known modules and every module below them (their `_modules`, whose
        links are noted as parents for the paths) are searched once and kept, again only for a
        parameter the last search did not find (by identity: a parameter made where a collected
        one was has its id). The caller holds the lock."""
        index = self._placed
        entry = None if index is None else index.get(id(param))
        if entry is None or entry[0]() is not param:
            entry = self._search().get(id(param))
        return entry if entry is not None and entry[0]() is param else None

    def _search(self) -> dict[int, tuple[Any, list[tuple[Any, str]]]]:
        """The known modules' and their submodules' `_parameters`, indexed (_placed_directly). The
        caller holds the lock."""
        index = self._placed = {}
        modules: dict[int, Any] = {}
        for table in (self._module_parents, self._param_owners):
            for _ref, owners in table.values():
                for owner_ref, _attr in owners:
                    owner = owner_ref()
                    if owner is not None:
                        modules[id(owner)] = owner
        for ref, _owners in self._module_parents.values():
            child = ref()
            if child is not None:
                modules[id(child)] = child
        self._note_submodules(modules)
        for module in modules.values():
            try:
                table = module.__dict__.get("_parameters") or {}
                for attr, value in table.items():
                    if value is not None:
                        index.setdefault(id(value), (weakref.ref(value), []))[1].append((weakref.ref(module), attr))
            except Exception:  # noqa: BLE001 - an odd module class: not searched
                continue
        return index

    def _note_submodules(self, modules: dict[int, Any]) -> None:
        """Add to `modules` every module below them (their `_modules` tables, the links the
        registration hooks did not see noted in `_module_parents`). The caller holds the lock."""
        parents = self._module_parents
        stack = list(modules.values())
        while stack:
            module = stack.pop()
            try:
                children = list((module.__dict__.get("_modules") or {}).items())
            except Exception:  # noqa: BLE001 - an odd module class: not walked
                continue
            for attr, child in children:
                if child is None:
                    continue
                try:
                    entry = parents.get(id(child))
                    if entry is None or entry[0]() is not child:
                        entry = parents[id(child)] = (weakref.ref(child), [])
                    if not any(ref() is module and name == attr for ref, name in entry[1]):
                        entry[1].append((weakref.ref(module), attr))
                except Exception:  # noqa: BLE001 - a child that takes no weak reference: not walked
                    continue
                if id(child) not in modules:
                    modules[id(child)] = child
                    stack.append(child)

    def name_of(self, param: Any) -> str | None:
        """The shortest module path of `param` (after dropping wrapper segments), None when no
        live module holds it. A path through a torch.fx GraphModule only where no other module
        holds it: the graph Dynamo compiles registers the parameters it reads under its own names
        (`self___param_groups_0__params___0` in a compiled optimizer step), which eager mode never
        makes."""
        with self._lock:
            entry = self._param_owners.get(id(param))
            if entry is None or entry[0]() is not param:
                entry = self._placed_directly(param)
                if entry is None:
                    return None
            candidates = []
            for ref, attr in entry[1]:
                module = ref()
                if module is None or not _still_holds(module, attr, param, "_parameters"):
                    continue
                graph = _is_graph_module(module)
                for prefix in self._prefixes(module):
                    parts = [p for p in prefix + [attr] if p not in _DROPPED_SEGMENTS]
                    candidates.append((graph, len(parts), ".".join(parts)))
        return min(candidates)[2] if candidates else None

    def registration_order(self) -> dict[int, int]:
        """id(param) -> its place in the order parameters were registered on modules: the
        script's order, the same in every mode."""
        with self._lock:
            return {key: index for index, key in enumerate(self._param_owners)}

    def module_params(self) -> list[Any]:
        """Every live parameter a live module still holds (the job's models, their deep-copied
        modules' included), by module path."""
        with self._lock:
            # Those of deep-copied modules too, which no registration hook saw (_placed_directly).
            entries = [*self._param_owners.values(), *self._search().values()]
        found: dict[str, Any] = {}
        for ref, _owners in entries:
            param = ref()
            if param is None:
                continue
            name = self.name_of(param)
            if name is not None:
                found.setdefault(name, param)
        return [found[name] for name in sorted(found)]


def _is_graph_module(module: Any) -> bool:
    import sys

    fx = sys.modules.get("torch.fx")
    return fx is not None and isinstance(module, fx.GraphModule)


def _still_holds(owner: Any, attr: str, value: Any, table: str = "_modules") -> bool:
    try:
        return owner.__dict__.get(table, {}).get(attr) is value
    except Exception:  # noqa: BLE001 - an odd module class: trust the registration
        return True


class _Digest:
    """One step's digests, as tensors until the end of the run."""

    def __init__(self, step: int, reasons: list[str]) -> None:
        self.step = step
        self.reasons = reasons
        self.params: list[Any] = []  # held: named and read back at the end
        self.ids: set[int] = set()
        # Each: (params of the group, (3, n) tensor of norm, max-abs, checksum), or (param, None)
        # for a parameter without a gradient (or one that cannot be digested).
        self.groups: list[tuple[list[Any], Any]] = []
        # Taken of an optimizer's parameters (its pre-hook, or the run's end with one alive), not
        # of the leaves a backward-only step's graph accumulated into: those may be made anew each
        # step (a fresh `x.requires_grad_()`), so only the last step's are the run's (params_seen).
        self.by_optimizer = False


class GradDigests:
    """The digests of one mode process; the step tracker calls `before_step` from the optimizer's
    pre-hook, or `after_backward` where a backward without an optimizer returns, when `countdown`
    reaches 0, and `events` once at the end."""

    def __init__(self, every: int | None = None, extra_steps: Iterable[int] = ()) -> None:
        self.every = every if every and every > 0 else None
        self.extra = sorted({int(s) for s in extra_steps if int(s) >= 0})
        self.countdown = 0  # pre-hook calls until the next look (0: the next call looks)
        self.armed = False  # a compile or capture since the last look (after_backward's `recompiled`)
        self.names = ParamNames()
        self._digests: dict[int, _Digest] = {}
        # The last step digested again at the run's end (check_at_end), when it was digested during it.
        self._at_end: dict[int, _Digest] = {}
        self._weights: dict[tuple[Any, Any], Any] = {}
        # id(param) -> its module path, looked up when the parameter is first digested: the model
        # may be gone by the end of the run (a script's main() returned), its parameters not (held).
        self._names: dict[int, str | None] = {}
        self._stepped: set[int] = set()  # ids of the tensors digested as an optimizer's (their fallback name)
        self.errors = 0
        self.last_error = ""

    def restart(self) -> None:
        """A forked child starts its own record: the parent's digests are the parent's."""
        self._digests.clear()
        self._at_end.clear()
        self.countdown = 0
        self.armed = False

    def arm(self) -> None:
        """A compile or capture happened: the step in progress is due."""
        self.countdown = 0
        self.armed = True

    def reasons(self, step: int, recompiled: bool) -> list[str]:
        found = []
        if step == 0:
            found.append(REASON_FIRST)
        if recompiled:
            found.append(REASON_RECOMPILE)
        if self.every is not None and step % self.every == 0:
            found.append(REASON_EVERY)
        if step in self.extra:
            found.append(REASON_EARLIER_MODE)
        return found

    def next_due(self, step: int) -> int:
        """The first step after `step` that is due whatever happens in it."""
        candidates = [s for s in self.extra if s > step][:1]
        if self.every is not None:
            candidates.append((step // self.every + 1) * self.every)
        return min(candidates) if candidates else NEVER

    def before_step(self, step: int, recompiled: bool, optimizer: Any) -> None:
        """An optimizer is about to step in step `step` (`recompiled`: a CA capture or a Dynamo
        compile happened in it). Digest its parameters' gradients when the step is due."""
        self.armed = False
        reasons = self.reasons(step, recompiled)
        if not reasons:
            self.countdown = self.next_due(step) - step
            return
        # Stay armed: another optimizer stepping in the same step digests its own parameters; the
        # next step's first look disarms.
        self.countdown = 0
        # inside the optimizer's step(), where the script's modes may be entered
        outside_user_modes(self.digest, step, reasons, _params_of(optimizer))

    def after_backward(self, step: int, params: Callable[[], list[Any]]) -> None:
        """A top-level backward returned, ending step `step` (no optimizer is alive). Digest the
        gradients of `params()` (the parameters its graph accumulated into) when the step is due:
        a compile or capture since the last look (`armed`) makes it a recompile step."""
        recompiled, self.armed = self.armed, False
        reasons = self.reasons(step, recompiled)
        self.countdown = self.next_due(step) - step  # one step per backward: the next look is its own
        if reasons:
            # where the script's backward returns, inside whatever mode it entered around it
            outside_user_modes(self._digest_grads_of, step, reasons, params)

    def _digest_grads_of(self, step: int, reasons: list[str], params: Callable[[], list[Any]]) -> None:
        found = params()
        if any(getattr(p, "grad", None) is not None for p in found):
            self.digest(step, reasons, found, optimizer=False)

    def digest(self, step: int, reasons: list[str], params: list[Any], optimizer: bool = True) -> None:
        """Digest the gradients of `params` as step `step`'s (`optimizer`: they are an optimizer's
        parameters; a tensor no module holds is then named as the optimizer's own)."""
        entry = self._digests.get(step)
        if entry is None:
            entry = self._digests[step] = _Digest(step, reasons)
        else:
            entry.reasons = list(dict.fromkeys(entry.reasons + reasons))
        entry.by_optimizer = entry.by_optimizer or optimizer
        self._fill(entry, params, optimizer)

    def check_at_end(self, step: int) -> None:
        """The run ended with `step`, its last, digested during it: digest the same parameters'
        gradients as they are held now; `events` adds REASON_SAME_AT_END where every number is
        the same (a final zero_grad, or a backward after the last optimizer step, differs)."""
        entry = self._digests.get(step)
        if entry is not None and step not in self._at_end:
            self._fill(self._at_end.setdefault(step, _Digest(step, [])), list(entry.params), optimizer=False)

    def _fill(self, entry: _Digest, params: list[Any], optimizer: bool) -> None:
        import torch

        # (device, dtype) -> the parameters and their gradients (a DTensor's: this rank's part,
        # sharded.py: reading the DTensor would be a collective in the job's step)
        by_group: dict[tuple[Any, Any], tuple[list[Any], list[Any]]] = {}
        sparse: list[tuple[Any, Any]] = []
        for p in params:
            if id(p) in entry.ids:
                continue
            entry.ids.add(id(p))
            entry.params.append(p)
            if id(p) not in self._names:
                self._names[id(p)] = self.names.name_of(p)
            if optimizer:
                self._stepped.add(id(p))
            g = p.grad
            if g is not None:
                g = local_part(g)
                if not readable(g):  # storage freed (sharded.py): not read
                    g = None
            if g is not None and g.is_complex() and g.layout == torch.strided:
                # a complex parameter (an FNO's spectral weights): its real and imaginary parts
                # side by side, whose norm is the complex gradient's
                g = torch.view_as_real(g.resolve_conj())
            if g is None or g.is_complex() or not g.is_floating_point() or g.numel() == 0:
                entry.groups.append(([p], None))
                continue
            if g.layout != torch.strided:  # nn.Embedding(sparse=True): digested from its values
                sparse.append((p, g))
                continue
            group, grads = by_group.setdefault((g.device, g.dtype), ([], []))
            group.append(p)
            grads.append(g)
        with torch.no_grad():
            for p, g in sparse:
                entry.groups.append(([p], self._sparse_digest(g)))
            for (device, dtype), (group, grads) in by_group.items():
                compute = torch.float64 if dtype == torch.float64 else torch.float32
                grads = [g.detach() for g in grads]
                if dtype != compute:
                    grads = [g.to(compute) for g in grads]
                norms = torch._foreach_norm(grads, 2)
                maxes = torch._foreach_norm(grads, float("inf"))
                sums = [self._checksum(g, device, compute) for g in grads]
                entry.groups.append((group, torch.stack([torch.stack(list(norms)), torch.stack(list(maxes)), torch.stack(sums)])))

    def _sparse_digest(self, g: Any) -> Any:
        """The digests of a sparse gradient, equal to those of its dense form (so a mode whose
        gradient is dense compares with one whose is sparse), from its nnz values alone: the
        dense form of an embedding's gradient is the size of the whole table."""
        import torch

        compute = torch.float64 if g.dtype == torch.float64 else torch.float32
        coo = (g if g.layout == torch.sparse_coo else g.to_sparse()).coalesce()
        sparse_dims = coo.sparse_dim()
        values = coo.values().to(compute).reshape(coo.values().shape[0], -1)  # (nnz, elements per index)
        rows = coo.indices()
        flat = torch.zeros(rows.shape[1], dtype=torch.int64, device=g.device)
        for dim in range(sparse_dims):  # the row-major index of each stored entry in the dense tensor
            flat = flat * g.shape[dim] + rows[dim]
        width = values.shape[1]
        index = flat[:, None] * width + torch.arange(width, device=g.device)[None, :]
        weights = 1 + (index % CHECKSUM_PERIOD).to(compute) / CHECKSUM_PERIOD
        norm = torch.linalg.vector_norm(values) if values.numel() else values.new_zeros(())
        max_abs = values.abs().max() if values.numel() else values.new_zeros(())
        return torch.stack([norm, max_abs, (values * weights).sum()]).reshape(3, 1)

    def _checksum(self, g: Any, device: Any, dtype: Any) -> Any:
        """sum_i g_i * w_i (module docstring), with a weight vector of one period only: the
        gradient's whole periods as a (q, P) matrix times the weights, plus the tail."""
        import torch

        key = (device, dtype)
        w = self._weights.get(key)
        if w is None:
            w = self._weights[key] = 1 + torch.arange(CHECKSUM_PERIOD, device=device, dtype=dtype) / CHECKSUM_PERIOD
        flat = g.reshape(-1)
        n = flat.numel()
        whole = n - n % CHECKSUM_PERIOD
        total = flat.new_zeros(())
        if whole:
            total = total + (flat[:whole].view(-1, CHECKSUM_PERIOD) @ w).sum()
        if whole < n:
            total = total + flat[whole:] @ w[: n - whole]
        return total

    def add_reason(self, step: int, reason: str) -> None:
        entry = self._digests.get(step)
        if entry is not None and reason not in entry.reasons:
            entry.reasons.append(reason)

    @property
    def steps(self) -> list[int]:
        return sorted(self._digests)

    @staticmethod
    def _values(entry: _Digest) -> dict[int, tuple[float, float, float] | None]:
        """A digest's numbers read back, by parameter (id): (norm, max-abs, checksum), or None."""
        values: dict[int, tuple[float, float, float] | None] = {}
        for group, stacked in entry.groups:
            if stacked is None:
                values[id(group[0])] = None
                continue
            rows = stacked.detach().cpu().tolist()
            for i, p in enumerate(group):
                values[id(p)] = (rows[0][i], rows[1][i], rows[2][i])
        return values

    def events(self) -> list[dict[str, Any]]:
        """The digests read back (the run's one wait for the device, at its end), as the fields of
        GradDigestEvent, one per digested step."""
        out = []
        for step in sorted(self._digests):
            entry = self._digests[step]
            values = self._values(entry)
            reasons = list(entry.reasons)
            again = self._at_end.get(step)
            if again is not None and self._values(again) == values:
                reasons.append(REASON_SAME_AT_END)
            names, dtypes, numels, norms, maxes, sums, shards = [], [], [], [], [], [], []
            for index, p in enumerate(self._by_registration(entry.params)):
                shards.append(is_shard(p))
                prefix = OPTIMIZER_TENSOR_PREFIX if id(p) in self._stepped else UNNAMED_TENSOR_PREFIX
                names.append(self._names.get(id(p)) or f"{prefix}{index}>")
                dtypes.append(str(p.dtype).replace("torch.", ""))
                numels.append(int(local_part(p).numel()))  # a DTensor's: this rank's part, as digested
                got = values.get(id(p))
                norms.append(None if got is None else got[0])
                maxes.append(None if got is None else got[1])
                sums.append(None if got is None else got[2])
            out.append({"step": step, "reasons": reasons, "names": names, "dtypes": dtypes, "numels": numels,
                        "norm": norms, "max_abs": maxes, "checksum": sums, "shard": shards if any(shards) else None})
        return out

    def _by_registration(self, params: list[Any]) -> list[Any]:
        """`params` in digest order, but parameters that share a module path (two top-level models'
        `0.weight`), which the report tells apart by their order ("0.weight (2)"), in the order
        they were registered: the digest order is the optimizers' stepping order where a pre-hook
        digested them, and their order at the run's end where none did (an optimizer stepping
        inside compiled code), which may differ between modes of one script."""
        slots: dict[str, list[int]] = {}
        for index, p in enumerate(params):
            name = self._names.get(id(p))
            if name is not None:
                slots.setdefault(name, []).append(index)
        shared = [indices for indices in slots.values() if len(indices) > 1]
        if not shared:
            return params
        order = self.names.registration_order()
        out = list(params)
        for indices in shared:
            ranked = sorted((params[i] for i in indices), key=lambda p: order.get(id(p), len(order)))
            for i, p in zip(indices, ranked):
                out[i] = p
        return out

    def params_seen(self) -> list[Any]:
        """The parameters of the digests taken of an optimizer's (not a backward-only step's leaves)."""
        seen: dict[int, Any] = {}
        for step in sorted(self._digests):
            if not self._digests[step].by_optimizer:
                continue
            for p in self._digests[step].params:
                seen.setdefault(id(p), p)
        return list(seen.values())


def _params_of(optimizer: Any) -> list[Any]:
    seen: dict[int, Any] = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            seen.setdefault(id(p), p)
    return list(seen.values())
