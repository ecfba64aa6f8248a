"""Writes train.csv and eval.csv next to this file from scikit-learn's bundled copy of the UCI
Breast Cancer Wisconsin (Diagnostic) table, split as FastEstimator's
`fastestimator.dataset.data.breast_cancer.load_data` splits it (train_test_split, 20 % eval,
random_state 42). Run once to make the bundled files (scikit-learn 1.7.2); fe-host itself
never needs scikit-learn:  .venv/bin/python examples/data/breast_cancer/export.py
"""

import csv
import pathlib

from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

here = pathlib.Path(__file__).parent
data = load_breast_cancer()
names = [n.replace(" ", "_") for n in data.feature_names]
x_train, x_eval, y_train, y_eval = train_test_split(
    data.data, data.target, test_size=0.2, random_state=42
)
for split, x, y in (("train", x_train, y_train), ("eval", x_eval, y_eval)):
    with open(here / f"{split}.csv", "w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(names + ["label"])
        for row, label in zip(x, y):
            out.writerow([repr(float(v)) for v in row] + [int(label)])
# The StandardScaler FastEstimator's recipe fits on the training split, for the manifest's
# Normalize op (population standard deviation, as StandardScaler).
print("mean =", [float(f"{v:.6g}") for v in x_train.mean(axis=0)])
print("std =", [float(f"{v:.6g}") for v in x_train.std(axis=0)])
