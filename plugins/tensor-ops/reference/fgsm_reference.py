"""FastEstimator's FGSM (PyTorch backend) on the data, weights and labels the Rust test wrote:
x_adv = clip(x + eps * sign(d loss / d x), clip_low or min(x), clip_high or max(x)) with
loss = cross_entropy(x @ w, y). Exit code 0 when fe-host's output agrees.

usage: fgsm_reference.py DIR EPSILON
"""

import sys

import numpy as np
import torch
import torch.nn.functional as F

d, eps = sys.argv[1], float(sys.argv[2])
load = lambda name: torch.from_numpy(np.load(f"{d}/{name}.npy"))
x, w, y, got = load("x"), load("w"), load("y"), load("x_adv")
x.requires_grad_(True)
loss = F.cross_entropy(x @ w, y)
(grad,) = torch.autograd.grad(loss, x)
want = torch.clamp(x + eps * torch.sign(grad), min=x.min(), max=x.max()).detach()
# Without clipping some entries would leave [min, max]: the test must exercise it.
assert ((x + eps * torch.sign(grad)) > x.max()).any() or ((x + eps * torch.sign(grad)) < x.min()).any()
if not torch.equal(want, got):
    sys.exit(f"largest difference {(want - got).abs().max()}")
print("agree")
