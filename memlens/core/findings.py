"""Every finding memlens reports about a training loop, in one place: its key (run.json's
event key, the same in the lab and in a watch), what detects it, where it points, its fix,
and what `main.py fix` applies for it.

The lab's loop (core.training, core.leaks) reports `leak` events and a watch (core.watch)
`diagnosis` events; both take their keys and fix texts from here. docs/watch.md's table of
diagnoses is this module's `markdown_table()` (tests/core/test_findings.py checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

# The keys, as run.json's events carry them.
GRAD_NOT_BACKWARDED = "forward under grad never backwarded"
GRAPH_KEPT = "graph kept across steps"
GRADS_NOT_CLEARED = "gradients never cleared"
STATE_NOT_DETACHED = "carried state without detach"
EVAL_IN_TRAIN_MODE = "validation in train mode"
GRAPH_GROWS = "graph grows step after step"
MODULE_CACHE = "activations cached on a module"
BACKWARD_TWICE = "graph backwarded twice"
MEMORY_GROWTH = "memory growth"

# What `main.py fix` does for a finding (core.fix), where it can change the source safely.
# (the kinds of core/fix/table.py's rules, as fix.json names them: a test holds them equal)
FIX_NO_GRAD = "no_grad"  # `with torch.no_grad():` around the forward (model.eval() too)
FIX_KEEP_VALUE = "detach"  # `.detach()` (or `.item()`) on what is kept across steps
FIX_ZERO_GRAD = "zero_grad"  # `optimizer.zero_grad()` before the backward
FIX_DETACH_STATE = "detach_state"  # `hidden = hidden.detach()` before the call
FIX_EVAL_MODE = "eval"  # model.eval() / model.train() around the evaluation
FIX_DETACH_CACHE = "detach_cache"  # `.detach()` on what a module stores on itself


@dataclass(frozen=True, slots=True)
class Finding:
    key: str
    number: int | None  # its number in docs/watch.md's table (a watch's diagnosis)
    found_when: str  # what detects it
    where: str  # where it points
    fix: str  # the fix, as the event's `fix` and the explanation say it
    fix_applies: str | None  # what `main.py fix` applies (FIX_*), or None
    seen_by: tuple[str, ...]  # "lab" (the presets' loop), "watch" (a user's script)


FINDINGS: tuple[Finding, ...] = (
    Finding(
        GRAD_NOT_BACKWARDED, 1,
        "a root forward under grad whose output's graph no backward reached by the end of "
        "its step (a C++ pre-hook on each output's autograd node counts the backward passes "
        "that reach it, and a weak pointer says whether the node lives: "
        "`core/native/call_tracker.h`; a Python pre-hook and a metadata marker where the "
        "native helpers are not built). Not after a backward that raised (whether it would "
        "have reached them is not known). When such graphs outlive their step's end (outputs "
        "kept: `all_preds.append(out)`, `preds[k] = model(x)`, `history.append(validate())`, "
        "a list emptied each epoch), once one outlives a second step's end or dies after "
        "outliving one while its line kept two or more: the holder, the bytes kept (the "
        "activations at the end of the step that kept the most, each storage once) and "
        "their growth a step (core/watch/kept.py)",
        "the forward call (bytes: what its graph saved); for kept outputs the variable that "
        "keeps them (found by walking from the script's variables, lists and dicts included, "
        "to the calls' output nodes, in C++) and its `append` or `d[k] =` line",
        "wrap it in `torch.no_grad()` (and call model.eval() for validation)",
        FIX_NO_GRAD, ("watch",)),
    Finding(
        GRAPH_KEPT, 2,
        "the graphs of two or more earlier steps are still alive at a later step's end, or "
        "one that still keeps saved bytes: a loss passed to backward (a marker in its "
        "autograd node's metadata dies with the node), or the output of a backwarded model "
        "call that something derived from it keeps (its node followed by weak pointer), so "
        "a `loss` kept while `loss / n` is backwarded (Lightning, accelerate, Hugging Face "
        "accumulation) or a model's outputs kept whole are found too. One backwarded loss "
        "held across an epoch (`return loss` from `train()`) keeps nothing: not reported; "
        "nor a graph later backwards run through again (carried state: diagnosis 6). In the "
        "lab: the `total_loss += loss` leak's sum keeps more autograd nodes at each of 8 "
        "steps",
        "the variable that holds it (a local in which function, a global, `self.x`, a list "
        "or a dict, or an attribute of a model or of an object of the script's own class: "
        "`model.train_losses`, `trainer.kept`), found by walking from the tensors in the "
        "script's frames to the old node, and the line where it is accumulated (`+=`, "
        "`append`, `x = x + loss`)",
        "use `loss.item()` (or `.detach()`) for what you keep across steps",
        FIX_KEEP_VALUE, ("lab", "watch")),
    Finding(
        GRADS_NOT_CLEARED, 3,
        "3 optimizer steps with no `zero_grad` (and no `grad = None`, no `p.grad = g`) "
        "before their backward, each with a larger grad norm",
        "the `optimizer.step()` line",
        "call optimizer.zero_grad() (set_to_none, the default) before each backward, or "
        "every k steps for gradient accumulation",
        FIX_ZERO_GRAD, ("watch",)),
    Finding(
        STATE_NOT_DETACHED, 4,
        "\"backward through the graph a second time\": the forward whose output node the "
        "failing backward reached for the second time; or, with `retain_graph=True`, "
        "autograd's \"modified by an inplace operation\" where the backward reached an "
        "earlier step's forward again (the optimizer changed the weights that graph saved) "
        "or the model was given a tensor with an earlier step's graph",
        "that forward call (e.g. `out, hidden = rnn(x, hidden)`); fix `hidden = "
        "hidden.detach()`",
        "detach what you carry: `hidden = hidden.detach()` at the start of each batch",
        FIX_DETACH_STATE, ("watch",)),
    Finding(
        EVAL_IN_TRAIN_MODE, 5,
        "an eval forward (as above) of a model with Dropout/BatchNorm while "
        "`model.training` is True; not `torch.optim.swa_utils.update_bn`'s pass (every "
        "BatchNorm's momentum None, no active Dropout: it recomputes the statistics on "
        "purpose)",
        "the forward call",
        "call model.eval() before validation (and model.train() after)",
        FIX_EVAL_MODE, ("watch",)),
    Finding(
        GRAPH_GROWS, 6,
        "4 steps in a row each with more autograd nodes behind backward's roots than the "
        "last, and either more bytes saved for backward held across steps each step or a "
        "model input whose graph an earlier step made (autograd numbers the nodes a thread "
        "makes in order: one numbered before the step began is an earlier step's). The "
        "bug: state carried with its graph and `backward(retain_graph=True)` "
        "(word_language_model's `p.data.add_` update makes no in-place error)",
        "the model call that was given the carried tensor, named (`hidden`); the growth a "
        "step (nodes, bytes, backward's time) and the `detach()` fix",
        "detach what you carry at the start of each step: `hidden = hidden.detach()` "
        "(then retain_graph=True is not needed)",
        FIX_DETACH_STATE, ("watch",)),
    Finding(
        MODULE_CACHE, 7,
        "at the start of a step (steps 1-4, then every 8th and the one after, while those "
        "scans take at most 1% of the run), an attribute of one of the models' modules "
        "(every module in their `_modules`, one a class's own `named_modules` hides too) "
        "holds tensors that carry a graph, in a tensor, list, tuple, deque or dict, which "
        "only an earlier step can have made (`self.cache = h`, `self.cache.append(h)`, a "
        "`deque(maxlen=k)` ring in `forward`); seen at two such starts. Not a loss (one "
        "value: diagnosis 2's), not an attribute a forward pre-hook recomputes "
        "(`weight_norm`), not a `_private` one, not a view of a parameter (tied weights' "
        "`self.w_t = emb.weight.t()`: detaching it would stop the embedding training)",
        "the line in the module's class that stores it, the holder (`self.cache` of "
        "`model.block`), the bytes held (each storage once) and their growth a step (only "
        "where it holds more tensors than when first seen: one tensor replaced by a larger "
        "one is \"not growing\")",
        "store `h.detach()` (or a value) on the module, or clear the cache each step",
        FIX_DETACH_CACHE, ("watch",)),
    Finding(
        BACKWARD_TWICE, 8,
        "\"backward through the graph a second time\" where the failing backward's root is "
        "a loss already backwarded, or the graph it reached again is this step's (two "
        "losses of one forward, each backwarded on its own), and no tensor was carried "
        "from an earlier step (that is diagnosis 4)",
        "the `backward()` line that failed",
        "backward each graph once: backward the sum of the losses that share it, or pass "
        "retain_graph=True to every backward of it but the last (state carried between "
        "micro-batches: detach it)",
        None, ("watch",)),
    Finding(
        MEMORY_GROWTH, None,
        "the end-of-step total grows by 32 KiB or more at each of 8 steps (with an eval "
        "every N steps: at each of 3 evals), its likely cause named from the techniques in "
        "force",
        "the step where the growth is seen; the category that grew",
        "hold values, not tensors, across steps (`.item()`, `.detach()`), run evaluation "
        "under torch.no_grad(), and detach carried state",
        None, ("lab",)),
)

BY_KEY: dict[str, Finding] = {f.key: f for f in FINDINGS}


def fix_of(key: str) -> str:
    """The fix text of the finding `key`."""
    return BY_KEY[key].fix


def markdown_table() -> str:
    """docs/watch.md's table of a watch's diagnoses."""
    rows = ["| # | key | found when | where |", "| --- | --- | --- | --- |"]
    for f in FINDINGS:
        if "watch" in f.seen_by and f.number is not None:
            rows.append(f"| {f.number} | `{f.key}` | {f.found_when} | {f.where} |")
    return "\n".join(rows)


if __name__ == "__main__":  # python -m memlens.core.findings: the table for docs/watch.md
    print(markdown_table())
