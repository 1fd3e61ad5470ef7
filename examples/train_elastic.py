#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""train_elastic: data-parallel training that survives hosts leaving and
joining (gsync.torch.elastic; docs/pytorch.md, "Elastic training").

One rank per host: run it on each host of a cluster (a test bed's sockets),
all with the same --job; start more later and they join at a step boundary,
kill one and the others go on without it. The model is train_ddp.py's MLP
on the same synthetic problem; each step every rank takes its share of one
global batch of --batch x world samples, sharded by its rank in the world
there is now, so the training is the same whatever the world.

Prints one line per step taken by this rank ("step 12 loss 1.2345 world 3
rank 1"), one per world change ("world epoch 8192: 2 hosts, 2 ranks, rank
0, from step 40"), and at the end "params <sha256>": every rank of the last
world prints the same. With --digest-every N it also prints "params at step
S <sha256>" after every N-th step, so ranks that run on can be compared
(tests/torch/test_elastic.py).

  examples/train_elastic.py --job run --socket /tmp/gtb-.../h1/gsyncd.sock --min-hosts 2
"""
import argparse
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

NCLS = 10


def digest(model) -> str:
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().numpy().tobytes())
    return h.hexdigest()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--job", required=True)
    p.add_argument("--socket", default=None, help="the host's gsyncd (default $GSYNC_SOCKET)")
    p.add_argument("--min-hosts", type=int, default=1)
    p.add_argument("--max-hosts", type=int, default=0)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--din", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--timeout-ms", type=int, default=20000)
    p.add_argument("--digest-every", type=int, default=0,
                   help="print the parameters' digest after every N-th step (0: at the end only)")
    args = p.parse_args()

    import torch
    import gsync.torch as gt

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(args.din, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, NCLS))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    g = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.samples, args.din, generator=g)
    y = (x @ torch.randn(args.din, NCLS, generator=g)).argmax(dim=1)
    loss_fn = torch.nn.CrossEntropyLoss()

    el = gt.elastic(model, opt, job=args.job, min_hosts=args.min_hosts,
                    max_hosts=args.max_hosts, socket=args.socket, timeout_ms=args.timeout_ms)
    epoch = None
    while el.step < args.steps:
        if el.world.epoch != epoch:
            epoch = el.world.epoch
            print(f"world epoch {epoch}: {el.world.hosts} hosts, {el.world_size} ranks, rank "
                  f"{el.rank}, from step {el.step}", flush=True)
        # This step's global batch, cut by the world there is now.
        perm = torch.randperm(args.samples, generator=torch.Generator().manual_seed(el.step))
        mine = perm[: args.batch * el.world_size].view(el.world_size, args.batch)[el.rank]
        opt.zero_grad()
        loss = loss_fn(model(x[mine]), y[mine])
        loss.backward()
        if not el.sync_grads():
            continue  # the world changed: the step is taken again in the new one
        opt.step()
        print(f"step {el.step} loss {loss.item():.4f} world {el.world_size} rank {el.rank}",
              flush=True)
        if args.digest_every and el.step % args.digest_every == 0:
            print(f"params at step {el.step} {digest(model)}", flush=True)
    print(f"params {digest(model)}", flush=True)
    el.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
