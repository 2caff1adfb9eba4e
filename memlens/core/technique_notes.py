"""What each technique does and what to expect when it is flipped, in a user's words (from the
article memlens teaches); the techniques panel's tooltips and any help text read it here."""

from __future__ import annotations

TECHNIQUE_NOTES: dict[str, str] = {
    "zero_grad": (
        "How gradients are cleared before each backward. set_to_none drops them (param.grad = "
        "None), so gradient memory is freed between steps; zeros keeps the buffers and fills "
        "them with 0; off never clears, so backward adds into the old gradients: grad norm "
        "climbs and training goes wrong."),
    "accumulate": (
        "Gradient accumulation: k micro-batches per optimizer step, each loss divided by k, "
        "clearing only once a cycle. Same memory per micro-batch, a k times larger effective "
        "batch."),
    "detach_state": (
        "Cut carried state out of the graph: the LSTM's hidden state between batches "
        "(hidden.detach()), the GAN generator's output in the discriminator step. Off, "
        "backward reaches the previous batch's freed graph and fails; with retain_graph the "
        "graph, memory and step time grow every step instead."),
    "retain_graph": (
        "backward(retain_graph=True): keep the graph and its saved tensors after backward. "
        "Needed only to backward twice through one graph; otherwise activations stay "
        "allocated until the next forward."),
    "no_grad_eval": (
        "Run validation under torch.no_grad(): no graph is built, so no activations are "
        "saved for backward. Expect less memory in the eval phase (a third or more of its "
        "activations) and a somewhat faster forward."),
    "eval_mode": (
        "model.eval() during validation: Dropout stops dropping and BatchNorm uses its "
        "running statistics. It changes the layers, not autograd: use it together with "
        "no_grad."),
    "amp": (
        "Mixed precision with torch.autocast: bf16 (CPU or CUDA), or fp16 with a GradScaler "
        "(CUDA). Activations shrink and conv nets step faster; the step keeps low-precision "
        "copies of the weights."),
    "leak_loss_sum": (
        "A bug to watch: total_loss += loss instead of loss.item(). In training the sum "
        "keeps every step's autograd nodes alive, but backward has already freed their "
        "saved tensors: tensor memory grows 0 B a step; what grows is the process heap, a "
        "few KB a step, and an event \"total_loss keeps every step's graph\" gives the "
        "nodes added a step. In validation run under grad (no_grad_eval off) the sum keeps "
        "every eval forward's saved tensors: memory grows at every eval (an event \"memory "
        "keeps growing\")."),
    "leak_cache": (
        "A bug to watch: the loss keeps its intermediates in a list that is never cleared, "
        "so memory grows every step (the kind of leak PyTorch's memory history finds)."),
}
