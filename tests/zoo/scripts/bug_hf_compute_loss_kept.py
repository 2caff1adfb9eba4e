"""BUG: a Hugging Face Trainer subclass whose compute_loss keeps each batch's outputs for a
later look (`self.kept.append(outputs)`): the Trainer backwards the loss (divided for
accumulation), and the kept outputs hold every step's graph. (The fix: keep
`outputs.logits.detach()`, or nothing.) A tiny GPT-2 from its config; HF_HUB_OFFLINE=1."""
import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

import zoo_truth  # noqa: E402


class RandomTokens(Dataset):
    def __init__(self, n, seq_len, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (n, seq_len), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class KeepingTrainer(Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.kept = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        self.kept.append(outputs)  # BUG: every batch's outputs, with their graph
        return (outputs.loss, outputs) if return_outputs else outputs.loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--accum", type=int, default=2)
    args = parser.parse_args()
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    zoo_truth.track(model)
    training_args = TrainingArguments(
        output_dir=tempfile.mkdtemp(), num_train_epochs=1, per_device_train_batch_size=4,
        gradient_accumulation_steps=args.accum, learning_rate=5e-4, logging_steps=4,
        save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True, seed=0,
        dataloader_num_workers=0)
    trainer = KeepingTrainer(model=model, args=training_args,
                             train_dataset=RandomTokens(48, 12, 64, 1))
    result = trainer.train()
    zoo_truth.final(result.training_loss, model, steps=trainer.state.global_step)


if __name__ == "__main__":
    main()
