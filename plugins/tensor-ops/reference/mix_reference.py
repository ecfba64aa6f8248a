"""FastEstimator's MixUpBatch and CutMixBatch formulas (PyTorch backend) on the batch and the
draws the Rust tests wrote, compared with fe-host's outputs. Exit code 0 when they agree.

usage: mix_reference.py DIR   (DIR holds x.npy, y.npy, draws.npy and the op's outputs)
"""

import sys

import numpy as np
import torch

d = sys.argv[1]
load = lambda name: torch.from_numpy(np.load(f"{d}/{name}.npy"))
x, y, draws = load("x"), load("y"), load("draws").double()
roll = lambda t: torch.roll(t, shifts=1, dims=0)


def agree(name, want, got):
    if want.shape != got.shape or not torch.allclose(want, got, rtol=0, atol=1e-6):
        sys.exit(f"{name}: largest difference {(want - got).abs().max()}")


if sys.argv[2] == "mixup":
    # MixUpBatch with shared_beta=False: lam = max(lam0, 1 - lam0) per sample.
    lam0 = draws.float()
    lam = torch.maximum(lam0, 1 - lam0)
    lx, ly = lam.reshape(-1, 1, 1, 1), lam.reshape(-1, 1)
    agree("mixed x", x * lx + roll(x) * (1.0 - lx), load("x_out"))
    agree("mixed y", y * ly + roll(y) * (1.0 - ly), load("y_out"))
    agree("lambda", lam, load("lam_out"))
    # FastEstimator >= 1.5 weighs the labels with lam0: for a draw below 0.5 that is not
    # what the image got, and fe-host's labels must differ from it there.
    low = lam0 < 0.5
    assert low.any(), "the draws must include one below 0.5"
    buggy = y * lam0.reshape(-1, 1) + roll(y) * (1.0 - lam0.reshape(-1, 1))
    assert not torch.allclose(buggy[low], load("y_out")[low]), "labels mixed with the raw draw"
else:
    # CutMixBatch: FastEstimator's _get_patch_coordinates with lam = max(lam0, 1 - lam0).
    lam0, cut_x, cut_y = draws
    lam = torch.maximum(lam0, 1 - lam0)
    _, _, height, width = x.shape
    cx, cy = width * cut_x, height * cut_y
    cw, ch = width * torch.sqrt(1 - lam), height * torch.sqrt(1 - lam)
    x1 = int(torch.round(torch.clamp(cx - cw / 2, min=0)))
    x2 = int(torch.round(torch.clamp(cx + cw / 2, max=width)))
    y1 = int(torch.round(torch.clamp(cy - ch / 2, min=0)))
    y2 = int(torch.round(torch.clamp(cy + ch / 2, max=height)))
    assert 0 < (x2 - x1) * (y2 - y1) < width * height, "the patch must cut something"
    mixed = x.clone()
    mixed[:, :, y1:y2, x1:x2] = roll(x)[:, :, y1:y2, x1:x2]
    kept = 1 - torch.tensor(float((x2 - x1) * (y2 - y1)), dtype=torch.float32) / (width * height)
    agree("mixed x", mixed, load("x_out"))
    agree("mixed y", y * kept + roll(y) * (1.0 - kept), load("y_out"))
    agree("lambda", kept.expand(x.shape[0]), load("lam_out"))
print("agree")
