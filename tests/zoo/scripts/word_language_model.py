"""Word-level LSTM language model in the shape of pytorch/examples word_language_model:
data batchified sequence-first (seq_len, batch), a 2-layer LSTM with dropout, the hidden
state carried across batches and cut with repackage_hidden, clip_grad_norm_, and the
example's default hand-written SGD update (p.data.add_) or, with --use-optimizer, AdamW.
Random token ids stand in for Wikitext-2."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo_truth

parser = argparse.ArgumentParser(description='PyTorch LSTM Language Model (random corpus)')
parser.add_argument('--emsize', type=int, default=32)
parser.add_argument('--nhid', type=int, default=32)
parser.add_argument('--nlayers', type=int, default=2)
parser.add_argument('--lr', type=float, default=20)
parser.add_argument('--clip', type=float, default=0.25)
parser.add_argument('--epochs', type=int, default=2)
parser.add_argument('--batch_size', type=int, default=8)
parser.add_argument('--bptt', type=int, default=12)
parser.add_argument('--dropout', type=float, default=0.2)
parser.add_argument('--seed', type=int, default=1111)
parser.add_argument('--use-optimizer', action='store_true')
args = parser.parse_args()

torch.manual_seed(args.seed)
ntokens = 100
train_ids = torch.randint(0, ntokens, (8 * 12 * 6 + 1,))
val_ids = torch.randint(0, ntokens, (10 * 12 * 2 + 1,))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


eval_batch_size = 10
train_data = batchify(train_ids, args.batch_size)
val_data = batchify(val_ids, eval_batch_size)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


model = RNNModel(ntokens, args.emsize, args.nhid, args.nlayers, args.dropout)
zoo_truth.track(model)
criterion = nn.NLLLoss()
if args.use_optimizer:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)


def evaluate(data_source):
    model.eval()
    total_loss = 0.
    hidden = model.init_hidden(eval_batch_size)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, args.bptt):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train():
    model.train()
    total_loss = 0.
    hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i)
        if args.use_optimizer:
            optimizer.zero_grad()
        else:
            model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        if args.use_optimizer:
            optimizer.step()
        else:
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            zoo_truth.count_step()
        total_loss += loss.item()
    return loss.item()


lr = args.lr
for epoch in range(1, args.epochs + 1):
    last = train()
    val_loss = evaluate(val_data)
    print('| end of epoch {:3d} | valid loss {:5.2f} | valid ppl {:8.2f}'.format(
        epoch, val_loss, math.exp(val_loss)))
zoo_truth.final(last, model)
