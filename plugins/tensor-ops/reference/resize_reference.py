"""torch.nn.functional.interpolate(x, size, mode) on the inputs the Rust test wrote, compared
with fe-host's Resize/Resize3D outputs to 1e-6 (FastEstimator's Resize3D is exactly this call).
Prints one line per case; exit code 0 when every case agrees.

usage: resize_reference.py DIR   (DIR/cases.txt: "OUTPUT INPUT MODE SIZE,SIZE" lines)
"""

import sys

import numpy as np
import torch
import torch.nn.functional as F

d = sys.argv[1]
load = lambda name: torch.from_numpy(np.load(f"{d}/{name}.npy"))
failed = False
for line in open(f"{d}/cases.txt").read().splitlines():
    out, inp, mode, size = line.split()
    size = [int(s) for s in size.split(",")]
    want = F.interpolate(load(inp), size, mode=mode)
    got = load(out)
    diff = (want - got).abs().max().item() if want.shape == got.shape else float("inf")
    print(f"{out} {mode} {size}: largest difference {diff}")
    failed |= not diff <= 1e-6
sys.exit(1 if failed else 0)
