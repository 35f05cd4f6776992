"""Your own PyTorch training loop, trained together with other processes by DiLoCo.

    python examples/diloco_own_loop.py                    # the first process creates the run
    python examples/diloco_own_loop.py --peer ADDRESS     # others join it (ADDRESS: printed above)

Everything above `peertrain.DiLoCo` is an ordinary torch loop: its model, optimizer and data.
"""

import argparse
import hashlib

import peertrain
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--peer", action="append", default=[], help="address of a member to join")
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--members", type=int, default=2)
args = parser.parse_args()

digits = load_digits()
x = torch.tensor(digits.data, dtype=torch.float32) / 16
y = torch.tensor(digits.target)
torch.manual_seed(len(args.peer))  # each process sees its own order of the data
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

node = peertrain.Node(listen=["/ip4/127.0.0.1/tcp/0"], peers=args.peer).start()
print("address", node.address, flush=True)  # what the other processes pass as --peer
diloco = peertrain.DiLoCo(
    model, optimizer, run="digits-own-loop", node=node, inner_steps=20,
    rounds=args.rounds, min_members=args.members,
)  # fmt: skip
while not diloco.finished:
    batch = torch.randint(0, len(x), (32,))
    loss = F.cross_entropy(model(x[batch]), y[batch])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if diloco.step(loss):
        print(f"round {diloco.round}: loss {loss.item():.3f}", flush=True)

weights = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
print("group checksum", diloco.state_checksum, flush=True)
print("model checksum", hashlib.sha256(weights).hexdigest()[:16], flush=True)
diloco.close()
node.stop()
