"""FastEstimator's Hadamard (numpy-op) and UnHadamard (tensor op, with fe.backend.iwd) re-implemented
in numpy on scipy.linalg.hadamard, compared with fe-host's outputs the Rust test wrote. Prints one
line per case; exit code 0 when every case agrees.

usage: hadamard_reference.py DIR   (DIR/cases.txt: "INDEX N_CLASSES CODE_LENGTH|None" lines)
"""

import math
import sys

import numpy as np
from scipy.linalg import hadamard

d = sys.argv[1]
load = lambda name: np.load(f"{d}/{name}.npy")


def code_rows(n_classes, code_length):
    if code_length is None:
        code_length = 1 << (n_classes - 1).bit_length()
    labels = hadamard(code_length).astype(np.float32)
    labels[np.arange(0, code_length, 2), 0] = -1  # Make first column alternate
    return labels[:n_classes], code_length


def un_hadamard(codes, labels, n_classes, code_length):
    max_prob = 0.99999
    eps = np.array((code_length + 1) * math.pow((1.0 - max_prob) / (max_prob * (n_classes - 1)), 1.0),
                   dtype=np.float32)
    x = np.sum(np.abs(np.expand_dims(codes, axis=1) - labels), axis=-1)
    x = np.maximum(x, eps)
    x = np.power(1.0 / x, 1.0)
    return x / np.reshape(np.sum(x, axis=-1), [-1, 1])


failed = False
for line in open(f"{d}/cases.txt").read().splitlines():
    i, n_classes, code_length = line.split()
    n_classes = int(n_classes)
    code_length = None if code_length == "None" else int(code_length)
    rows, length = code_rows(n_classes, code_length)
    labels = load(f"labels{i}")
    encoded = np.take(rows, np.squeeze(labels).astype("int64"), axis=0)
    if not np.array_equal(encoded, load(f"encoded{i}")):
        failed = True
        print(f"case {i}: Hadamard codes differ")
        continue
    diffs = []
    for inp, out in [("outputs", "decoded"), ("encoded", "round_trip")]:
        want = un_hadamard(load(f"{inp}{i}"), rows, n_classes, length)
        got = load(f"{out}{i}")
        diffs.append(np.abs(want - got).max() if want.shape == got.shape else float("inf"))
    round_trip = np.argmax(un_hadamard(encoded, rows, n_classes, length), axis=-1)
    ok = max(diffs) <= 1e-6 and np.array_equal(round_trip, labels)
    failed |= not ok
    print(f"case {i} ({n_classes} classes, code {length}): UnHadamard largest differences {diffs}, ok {ok}")
sys.exit(1 if failed else 0)
