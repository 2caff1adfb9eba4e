"""Hugging Face transformers Trainer on a tiny GPT-2 built from its config (no download):
causal LM on random token ids, TrainingArguments with --accum (gradient_accumulation_steps)
and an evaluation each epoch. Run with HF_HUB_OFFLINE=1."""
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--accum", type=int, default=1)
    args = parser.parse_args()
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=32)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    zoo_truth.track(model)
    training_args = TrainingArguments(
        output_dir=tempfile.mkdtemp(), num_train_epochs=args.epochs,
        per_device_train_batch_size=4, per_device_eval_batch_size=8,
        gradient_accumulation_steps=args.accum, learning_rate=5e-4, warmup_steps=2,
        logging_steps=4, eval_strategy="epoch", save_strategy="no", report_to="none",
        use_cpu=True, disable_tqdm=True, seed=0, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=training_args,
                      train_dataset=RandomTokens(64, 16, 128, 1),
                      eval_dataset=RandomTokens(16, 16, 128, 2))
    result = trainer.train()
    print(trainer.evaluate())
    zoo_truth.final(result.training_loss, model, steps=trainer.state.global_step)


if __name__ == "__main__":
    main()
