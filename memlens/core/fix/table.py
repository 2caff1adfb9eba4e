"""What `fix` does for each diagnosis key, in one table: whether it can change the user's
code for it, the change, and whether the script's results stay the same after it.

The keys are the watch's (core.watch.diagnoses, core.watch.growth); a key missing here has
no fix. `plan` reads the table to choose a fix, `report` to say what a fix did and why the
results may differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlens.core import findings
from memlens.core.findings import GRAPH_GROWS


@dataclass(frozen=True)
class FixRule:
    kind: str  # fix.json's `kind`
    change: str  # the source change, in a few words (docs/fix.md, the report)
    does: str  # one line: what the change does to memory
    # None: the script's results stay the same (checked: its printed lines compared);
    # else why they differ by design
    changes_results: str | None


NO_GRAD = FixRule(
    "no_grad", "`with torch.no_grad():` around the forward's statement (or its loop)",
    "the forward runs under torch.no_grad(): its graph is never built, so the tensors it "
    "saved for a backward that never came are not kept", None)
EVAL = FixRule(
    "eval", "`model.eval()` before the validation and `model.train()` after it",
    "the model is evaluated in eval mode (Dropout off, BatchNorm's running statistics), and "
    "trains in train mode again after it",
    "eval() switches Dropout off and BatchNorm to its running statistics: the validation's "
    "figures differ by design, and so may what follows (Dropout draws no random numbers)")
NO_GRAD_EVAL = FixRule(
    "no_grad+eval", "`model.eval()`, `with torch.no_grad():` around the forward, "
    "`model.train()` after it",
    "the forward runs under torch.no_grad() in eval mode: no graph is built for it, and "
    "Dropout/BatchNorm behave as for evaluation", EVAL.changes_results)
DETACH_KEPT = FixRule(
    "detach", "`.detach()` on the value kept across steps (`.item()` where the program "
    "uses what it keeps only as a number)",
    "what is kept across steps no longer holds the autograd graph that made it, so each "
    "step's graph is freed when its step ends", None)
ITEM_KEPT = FixRule(
    "item", DETACH_KEPT.change,
    "what is kept across steps is a Python number, not a tensor holding the autograd graph "
    "that made it, so each step's graph is freed when its step ends", None)
ZERO_GRAD = FixRule(
    "zero_grad", "`optimizer.zero_grad()` before the backward",
    "gradients are cleared before each backward, so each update uses its own step's "
    "gradient instead of the sum of every step's so far",
    "clearing the gradients changes every update after the first: the losses differ by "
    "design (they were the sum of all the gradients so far)")
DETACH_STATE = FixRule(
    "detach_state", "`hidden = hidden.detach()` (tuples: each tensor) before the call that "
    "carries it",
    "the state carried into the next step no longer links its graph to every earlier "
    "step's, so each backward runs through its own step only and frees it",
    "detaching carried state truncates backpropagation through time (each backward stops "
    "at its own step): the losses differ by design")

DETACH_CACHE = FixRule(
    "detach_cache", "`.detach()` on what a module's forward stores on itself",
    "what the module keeps on itself no longer holds the autograd graph of the step that "
    "made it, so each step's graph is freed when its step ends",
    None)

# diagnosis key -> its fix (validation in train mode alone: EVAL; with a forward never
# backwarded at the same place: NO_GRAD_EVAL, plan merges them)
FIXES: dict[str, FixRule] = {
    findings.GRAD_NOT_BACKWARDED: NO_GRAD,
    findings.GRAPH_KEPT: DETACH_KEPT,
    findings.GRADS_NOT_CLEARED: ZERO_GRAD,
    findings.STATE_NOT_DETACHED: DETACH_STATE,
    findings.EVAL_IN_TRAIN_MODE: EVAL,
    GRAPH_GROWS: DETACH_STATE,
    findings.MODULE_CACHE: DETACH_CACHE,
}
RULES_BY_KIND: dict[str, FixRule] = {
    r.kind: r for r in (NO_GRAD, EVAL, NO_GRAD_EVAL, DETACH_KEPT, ITEM_KEPT, ZERO_GRAD,
                        DETACH_STATE, DETACH_CACHE)}


def rule_for(key: str) -> FixRule | None:
    """The fix for a diagnosis key, or None where `fix` has none."""
    return FIXES.get(key)
