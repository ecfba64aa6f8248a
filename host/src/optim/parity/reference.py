# The reference side of optim::parity: torch.optim and torch.nn.utils.clip_grad_* on CPU over
# the parameters of a small conv net and five steps of given gradients, everything written
# to one .npz that the Rust side compares bit for bit.
# argv: variants.json (name, class, kwargs), out.npz
import json
import sys

import numpy as np
import torch

STATE_NAMES = {
    "exp_avg": "exp_avg",
    "exp_avg_sq": "exp_avg_sq",
    "max_exp_avg_sq": "max_exp_avg_sq",
    "momentum_buffer": "momentum",
    "square_avg": "square_avg",
    "grad_avg": "grad_avg",
}

torch.manual_seed(0)
net = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3),
    torch.nn.ReLU(),
    torch.nn.Conv2d(8, 16, 3),
    torch.nn.Flatten(),
    torch.nn.Linear(16 * 4 * 4, 10),
)
start = [p.detach().clone() for p in net.parameters()]
# Magnitudes from 1e-2 to 1e2, so that every term of every update takes part in the rounding.
grads = [[torch.randn_like(p) * 10.0 ** (s - 2) for p in start] for s in range(5)]

out = {}
for i, p in enumerate(start):
    out[f"param/{i}"] = p.numpy()
for s, step in enumerate(grads):
    for i, g in enumerate(step):
        out[f"grad/{s}/{i}"] = g.numpy()

with open(sys.argv[1]) as f:
    variants = json.load(f)
for v in variants:
    params = [p.clone().requires_grad_(True) for p in start]
    opt = getattr(torch.optim, v["class"])(params, **v["kwargs"])
    for step in grads:
        for p, g in zip(params, step):
            p.grad = g.clone()
        opt.step()
    name = v["name"]
    for i, p in enumerate(params):
        out[f"{name}/param/{i}"] = p.detach().numpy()
        for key, value in opt.state[p].items():
            if key == "step":
                out[f"{name}/step/{i}"] = np.array(float(value), dtype=np.float64)
            elif value is not None:
                out[f"{name}/{STATE_NAMES[key]}/{i}"] = value.numpy()

# Clipping: the fourth step's gradients (magnitude 10), whose norms are far above 1.
for tag, clip in [
    ("norm2", lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0)),
    ("norm3", lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0, norm_type=3.0)),
    ("norminf", lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0, norm_type="inf")),
    ("big", lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1e6)),
    ("value", lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.5)),
]:
    params = [p.clone().requires_grad_(True) for p in start]
    for p, g in zip(params, grads[3]):
        p.grad = g.clone()
    clip(params)
    for i, p in enumerate(params):
        out[f"clip/{tag}/{i}"] = p.grad.numpy()

np.savez(sys.argv[2], **out)
