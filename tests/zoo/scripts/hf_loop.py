"""A hand-written training loop around a Hugging Face model, as the transformers course
writes one: a tiny GPT-2 built from its config (no download), a DataLoader of random token
ids, AdamW with get_linear_schedule_with_warmup, `outputs = model(input_ids=..., labels=...)`,
`outputs.loss.backward()`, clip_grad_norm_, and an evaluation under no_grad each epoch."""
import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup  # noqa: E402

import zoo_truth  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=32)
    model = GPT2LMHeadModel(config)
    zoo_truth.track(model)
    train_ids = torch.randint(0, 128, (64, 16))
    eval_ids = torch.randint(0, 128, (16, 16))
    train_dataloader = DataLoader(train_ids, batch_size=8, shuffle=True)
    eval_dataloader = DataLoader(eval_ids, batch_size=8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    num_training_steps = args.epochs * len(train_dataloader)
    lr_scheduler = get_linear_schedule_with_warmup(optimizer, 2, num_training_steps)

    model.train()
    for epoch in range(args.epochs):
        model.train()
        for batch in train_dataloader:
            outputs = model(input_ids=batch, labels=batch)
            loss = outputs.loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        model.eval()
        eval_loss = 0.0
        for batch in eval_dataloader:
            with torch.no_grad():
                eval_loss += model(input_ids=batch, labels=batch).loss.item()
        print(f"epoch {epoch}: train loss {loss.item():.4f} eval loss {eval_loss / len(eval_dataloader):.4f}")
    zoo_truth.final(loss, model)


if __name__ == "__main__":
    main()
