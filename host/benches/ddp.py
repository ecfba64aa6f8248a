# PyTorch's side of host/benches/ddp.rs, started by `.venv/bin/torchrun --standalone`.
#
#   ddp.py train STEPS BATCH    DDP (Gloo) LeNet with Adam on x.idx/y.idx (min-max scaled once),
#                               BATCH the global batch split evenly across ranks
#   ddp.py allreduce ROUNDS     rank 0 prints the median time of one all-reduce of LeNet's
#                               gradients: as one flat bucket (what DDP does) and tensor by tensor
#
# Threads per rank come from OMP_NUM_THREADS (torch.set_num_threads follows it).
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
from torch import nn


class LeNet(nn.Module):
    """FastEstimator's LeNet, as in host/benches/common (fe-host's fe-models plugin)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.conv3 = nn.Conv2d(64, 64, 3)
        self.fc1 = nn.Linear(576, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = self.conv3(x).flatten(1)
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), -1)


def idx(path):
    raw = open(path, "rb").read()
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4 : 4 + 4 * dims])
    return torch.frombuffer(bytearray(raw[4 + 4 * dims :]), dtype=torch.uint8).reshape(shape)


def train(steps, batch):
    rank, world = dist.get_rank(), dist.get_world_size()
    x = idx("x.idx").float().unsqueeze(1)
    low, high = x.amin(dim=(1, 2, 3), keepdim=True), x.amax(dim=(1, 2, 3), keepdim=True)
    x = (x - low) / (high - low).clamp_min(1e-7)
    y = idx("y.idx").long()
    torch.manual_seed(42)
    model = nn.parallel.DistributedDataParallel(LeNet())
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    per_rank = batch // world
    shuffle = torch.Generator().manual_seed(0)
    order, at = torch.randperm(len(x), generator=shuffle), 0
    for _ in range(steps):
        if at + batch > len(x):
            order, at = torch.randperm(len(x), generator=shuffle), 0
        i = order[at + rank * per_rank : at + (rank + 1) * per_rank]
        at += batch
        p = model(x[i])
        loss = -torch.log(p.gather(1, y[i][:, None]).clamp_min(1e-7)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()


def allreduce(rounds):
    grads = [p.detach().clone() for p in LeNet().parameters()]
    flat = torch.cat([g.flatten() for g in grads])

    def median_seconds(step):
        for _ in range(10):
            step()
        times = []
        for _ in range(rounds):
            dist.barrier()
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        return sorted(times)[len(times) // 2]

    bucket = median_seconds(lambda: dist.all_reduce(flat))
    tensors = median_seconds(lambda: [dist.all_reduce(g) for g in grads])
    if dist.get_rank() == 0:
        print(f"allreduce floats {flat.numel()} bucket_us {bucket * 1e6:.1f} tensors_us {tensors * 1e6:.1f}")


def main():
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo")
    if sys.argv[1] == "train":
        train(int(sys.argv[2]), int(sys.argv[3]))
    else:
        allreduce(int(sys.argv[2]))
    dist.destroy_process_group()


main()
