"""What a watch finds in a user's program: its models (root module calls), its optimizers,
and the tensors its models are called with, named as the script names them.

Nothing here keeps a user's object alive: models, optimizers and inputs are held by weak
reference.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor, nn
from torch.nn.utils.parametrize import ParametrizationList

from memlens.core.recorder.sharded import Sharding
from memlens.core.watch import diagnoses as dx

_EVAL_LAYERS = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)
INPUT_ARGS = 8  # of a root call's arguments looked at for inputs (16 keyword values)


def has_eval_layers(module: nn.Module) -> bool:
    return any(isinstance(m, _EVAL_LAYERS) for m in module.modules())


def statistics_pass(module: nn.Module) -> bool:
    """A train-mode pass that only recomputes BatchNorm's statistics, on purpose:
    torch.optim.swa_utils.update_bn sets every BatchNorm's momentum to None (a cumulative
    average) and runs the model in train mode under no_grad. Not validation in train mode."""
    bn = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    dropping = any(isinstance(m, nn.modules.dropout._DropoutNd) and m.training and m.p > 0
                   for m in module.modules())
    return bool(bn) and not dropping and all(m.momentum is None for m in bn)


def as_list(x) -> list:
    if x is None:
        return []
    if isinstance(x, (nn.Module, torch.optim.Optimizer)):
        return [x]
    return list(x)


class Found:
    """The models and optimizers found so far, shaped as MemoryProbe reads a preset."""

    def __init__(self) -> None:
        self.models: list[weakref.ref] = []
        self.optimizers_refs: list[weakref.ref] = []
        # The tensors the models were called with this step and the last (data batches,
        # carried state): `other`, as a preset's carried tensors are. Weak: memlens never
        # keeps one alive. Storage pointer -> a weak reference to one tensor in it: a sample
        # counts storages, so one tensor of each is enough.
        self.inputs: dict[int, weakref.ref] = {}
        self._earlier: dict[int, weakref.ref] = {}
        self._inputs_step = -1
        self.carried_refs: list[weakref.ref] = []  # both steps' (the native sample takes them)
        # Optimizers known to exist but not stepped yet (a GAN's second, before its first
        # step): not measured, but their parameters are there (Discovery's list).
        self.candidates: list[weakref.ref] = []
        self._sharding: Sharding | None = None
        self._sharding_of: tuple = ()
        # Wrappers called in a known model's stead (DDP around a LightningModule): no model
        # of their own, but what they replicate or shard is the sharding's
        self.wrappers: list[weakref.ref] = []

    @property
    def sharding(self) -> Sharding | None:
        """How the models are sharded (FSDP) or replicated (DDP), as of the models found now
        (the probe reads it when it is made)."""
        models = self.model_list() + [w for r in self.wrappers if (w := r()) is not None]
        key = tuple(map(id, models))
        if key != self._sharding_of:
            self._sharding_of = key
            self._sharding = Sharding.of(models)
        return self._sharding

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for r in self.optimizers_refs if (o := r()) is not None]

    def model_list(self) -> list[nn.Module]:
        return [m for r in self.models if (m := r()) is not None]

    def parameters(self) -> list[Tensor]:
        seen: set[int] = set()
        out = []
        groups = [list(m.parameters()) for m in self.model_list()]
        optimizers = self.optimizers + [o for r in self.candidates if (o := r()) is not None]
        groups += [[p for g in o.param_groups for p in g["params"]] for o in optimizers]
        for params in groups:
            for p in params:
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
        return out

    def buffers(self) -> list[Tensor]:
        """The models' buffers (BatchNorm running stats, a mask), each once."""
        seen: set[int] = set()
        return [b for m in self.model_list() for b in m.buffers()
                if id(b) not in seen and not seen.add(id(b))]

    def carried_tensors(self) -> list[Tensor]:
        return [t for r in self.carried_refs if (t := r()) is not None]

    def note_inputs(self, step: int, args: tuple, kwargs: dict) -> None:
        """The tensors a root call was given, positionally or by keyword (`input_ids=`,
        `labels=`: every Hugging Face model), and inside tuples and lists (an LSTM's state)."""
        if step != self._inputs_step:
            self._earlier = self.inputs if step == self._inputs_step + 1 else {}
            self.inputs = {}
            self._inputs_step = step
            self.carried_refs = list(self._earlier.values())
        values = list(args[:INPUT_ARGS])
        if kwargs:
            values += list(kwargs.values())[: 2 * INPUT_ARGS]
        for a in values:
            if isinstance(a, Tensor):
                self._note(a)
            elif isinstance(a, (tuple, list)):
                for t in a[:4]:
                    if isinstance(t, Tensor):
                        self._note(t)

    def _note(self, t: Tensor) -> None:
        # By object: a sample counts each storage once (LightProbe, MemoryProbe), so a GAN's
        # fake and fake.detach() may both be here. A dead reference's id may be a new tensor.
        old = self.inputs.get(id(t))
        if old is None or old() is not t:
            ref = self.inputs[id(t)] = weakref.ref(t)
            self.carried_refs.append(ref)


class ModelInfo:
    """What a root call needs to know of a module, looked up once (by id, checked by weak
    reference: a freed module's id may be a new one's)."""

    __slots__ = ("eval_layers", "is_model", "name", "param_ids", "ref")

    def __init__(self, module: nn.Module, is_model: bool) -> None:
        self.ref = weakref.ref(module)
        self.is_model = is_model
        self.name = ""
        self.param_ids: frozenset = frozenset(map(id, module.parameters())) if is_model else (
            frozenset())
        self.eval_layers = is_model and has_eval_layers(module)


class Discovery:
    """The models and optimizers a watch knows, named, and which optimizers end a step."""

    def __init__(self, models=None, optimizers=None) -> None:
        self.found = Found()
        self.explicit_models = models is not None
        self.names: dict[int, str] = {}  # id(model) -> its name
        self._candidates: list[weakref.ref] = []  # every optimizer known to exist
        # those the program made or holds (not one left over from earlier work in the
        # process): their parameters count before they step
        self._held: list[weakref.ref] = []
        self.found.candidates = self._held
        self.models_seen: dict[str, dict] = {}  # kept after the models are gone
        self.optimizers_seen: dict[int, str] = {}
        self._active_ids: dict[int, weakref.ref] = {}  # optimizers measured, by id
        self._required: set[int] = set()  # required_optimizers' answer for _required_key
        self._required_key: tuple | None = None
        self.probe_stale = True  # a model or an optimizer was found since the probe was made
        self.modules: dict[int, ModelInfo] = {}  # every module called at the root, by id
        self.ever_stepped: set[int] = set()
        # the parameter ids (ModelInfo.param_ids) of each model called under grad this step:
        # kept, not merged (a union a step cost a 162-parameter model 31 us after its kernels)
        self.called_params: list[frozenset[int]] = []
        self.called_models: set[int] = set()  # ids of the models called under grad
        for m in as_list(models):
            self.add_model(m)
        for o in as_list(optimizers):
            self.add_optimizer(o, active=True)
        self._find_live_optimizers()

    def add_model(self, m: nn.Module, name: str | None = None, called: bool = True) -> str:
        """Its name: as given, else as the script names it, else its class (made unique).
        `called`: found by a root call (else held in the script's variables, not called
        yet: run.json says so until it is)."""
        known = self.names.get(id(m))
        if known is not None:
            if called:
                self.models_seen[known].pop("called", None)
            return known
        base = name or dx.variable_name(m) or type(m).__name__
        taken = set(self.names.values())
        name, k = base, 2
        while name in taken:
            name, k = f"{base}{k}", k + 1
        self.names[id(m)] = name
        self.found.models.append(weakref.ref(m))
        self.probe_stale = True
        self.models_seen[name] = {"name": name, "class": type(m).__name__,
                                  "parameters": sum(p.numel() for p in m.parameters())}
        if not called:
            self.models_seen[name]["called"] = False
        return name

    def add_optimizer(self, o: torch.optim.Optimizer, active: bool, held: bool = True) -> None:
        """A candidate may end steps (see required_optimizers); an active optimizer (passed
        in, or one that stepped) is also measured. `held`: the program made it or holds it
        (else found among the process's objects at the start). A wrapper that steps
        another (accelerate's AcceleratedOptimizer) is that optimizer."""
        inner = o.__dict__.get("optimizer")
        if isinstance(inner, torch.optim.Optimizer):
            o = inner
        if self.known_active(o):
            return  # the usual case, every step: measured already (so a candidate too)
        if all(r() is not o for r in self._candidates):
            self._candidates.append(weakref.ref(o))
            self._required_key = None
        if held and all(r() is not o for r in self._held):
            self._held.append(weakref.ref(o))
            self.probe_stale = True  # its parameters count from now on
        if active:
            self._active_ids[id(o)] = ref = weakref.ref(o)
            self.found.optimizers_refs.append(ref)
            self.probe_stale = True
            self.optimizers_seen[id(o)] = type(o).__name__

    def _find_live_optimizers(self) -> None:
        """Optimizers made before the watch began: all of them must step to end a step."""
        import gc

        base = torch.optim.Optimizer
        for obj in gc.get_objects():
            if issubclass(type(obj), base):  # type(): never a lazy object's __class__
                self.add_optimizer(obj, active=False, held=False)

    def scan_variables(self) -> None:
        """Models the script holds in its variables but has not called yet (an SWA
        AveragedModel, updated by hand and called only at the end): their parameters exist,
        so they count. A module sharing parameters with a known model (a wrapper, a
        submodule) is that model."""
        if self.explicit_models:
            return
        known = {id(p) for m in self.found.model_list() for p in m.parameters()}
        held: dict[int, tuple[str, nn.Module, list]] = {}
        for f in dx.program_frames(2):
            for scope in (dx.frame_locals(f), f.f_globals):
                for name, value in list(scope.items()):
                    if isinstance(value, torch.optim.Optimizer):
                        self.add_optimizer(value, active=False)
                    elif (isinstance(value, nn.Module) and id(value) not in self.names
                            and id(value) not in held and not name.startswith("_")
                            and name != "self"):
                        held[id(value)] = (name, value, list(value.parameters()))
        # the largest first: a model before the blocks it is made of
        for name, value, params in sorted(held.values(), key=lambda h: -len(h[2])):
            if params and not any(id(p) in known for p in params):
                self.add_model(value, name, called=False)
                known.update(id(p) for p in params)

    def module(self, module: nn.Module) -> ModelInfo:
        info = self.modules.get(id(module))
        if info is None or info.ref() is not module:
            # A parametrized weight read outside a forward (spectral_norm at construction, a
            # log of `layer.weight`) calls its ParametrizationList at the root: the
            # parametrization computing the weight, never a model's forward.
            # A model passed to watch(models=...) is one whatever its parameters() shows
            # (a module whose own named_modules hides its children shows none).
            given = self.explicit_models and id(module) in self.names
            is_model = given or (not self.explicit_models and (
                next(module.parameters(), None) is not None) and (
                not isinstance(module, ParametrizationList)))
            info = self.modules[id(module)] = ModelInfo(module, is_model)
            if is_model:  # (no parameters is part of every model: a given one is itself)
                info.name = (self.add_model(module) if given else
                             self._part_of_model(module, info) or self.add_model(module))
        return info

    def _part_of_model(self, module: nn.Module, info: ModelInfo) -> str | None:
        """A module all of whose parameters are a known model's is that model, called in
        part (a LightningModule's `self.net`, a GAN's `self.G`) or through a wrapper (DDP):
        its calls are named `model.part` (or `model`), and no second model is listed."""
        for m in self.found.model_list():
            if m is module or id(m) not in self.names:
                continue
            if not info.param_ids <= frozenset(map(id, m.parameters())):
                continue
            name = self.names[id(m)]
            self.models_seen[name].pop("called", None)
            if any(sub is m for sub in module.modules()):  # a wrapper around the model
                self.found.wrappers.append(weakref.ref(module))
                self.probe_stale = True  # its sharding: a probe made again reads it
            part = next((p for p, sub in m.named_modules() if sub is module), None)
            return f"{name}.{part}" if part else name
        return None

    def note_called(self, module: nn.Module, info: ModelInfo) -> None:
        """A model called under grad this step: its optimizers end the step."""
        if id(module) not in self.called_models:
            self.called_models.add(id(module))
            self.called_params.append(info.param_ids)

    def new_step(self) -> None:
        self.called_params = []
        self.called_models = set()
        self._required_key = None

    def required_optimizers(self) -> set[int]:
        """The optimizers a step waits for: those that have stepped in this run, and those
        that own a parameter of a model this step called (a GAN's second optimizer before
        its first step); an optimizer left over from earlier work is neither."""
        key = (len(self.called_models), len(self.ever_stepped), len(self._candidates))
        if key != self._required_key:  # grows only within a step: unchanged, the same set
            called = self.called_params
            self._required = {
                id(o) for r in self._candidates if (o := r()) is not None
                if id(o) in self.ever_stepped
                or any(id(p) in ids for g in o.param_groups for p in g["params"][:1]
                       for ids in called)}
            self._required_key = key
        return self._required

    def known_active(self, o) -> bool:
        """Whether `o` is an optimizer measured already (add_optimizer's usual case: never a
        wrapper, whose inner optimizer is the one added)."""
        known = self._active_ids.get(id(o))
        return known is not None and known() is o

    @staticmethod
    def is_wrapper(o) -> bool:
        """An optimizer that steps another (accelerate's AcceleratedOptimizer, which steps
        the one it wraps only at the end of an accumulation): its own step is no step."""
        return isinstance(o.__dict__.get("optimizer"), torch.optim.Optimizer)

    def steppable_optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers measured or held by the program, each once, less wrappers that
        step another (accelerate's AcceleratedOptimizer: its inner optimizer steps)."""
        seen: set[int] = set()
        out = []
        for o in self.found.optimizers + [o for r in self._held if (o := r()) is not None]:
            wrapped = o.__dict__.get("optimizer")
            if id(o) not in seen and not isinstance(wrapped, torch.optim.Optimizer):
                seen.add(id(o))
                out.append(o)
        return out

    def models_by_name(self) -> dict[str, nn.Module]:
        return {self.names[id(m)]: m for m in self.found.model_list()}

    @property
    def nothing(self) -> bool:
        return not self.models_seen and not self.optimizers_seen
