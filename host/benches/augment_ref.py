"""The torchvision side of the augmentation benchmark: the same chain with `transforms.v2` in a
PyTorch DataLoader with the same workers and batch size. Prints `samples seconds`, timed from
building the dataset to the end of one epoch.

usage: augment_ref.py cifar WORKERS BATCH X.npy
       augment_ref.py imagenet WORKERS BATCH DIR
"""

import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.io import decode_jpeg, read_file
from torchvision.transforms import v2

MEAN, STD = [0.4914, 0.4822, 0.4465], [0.2471, 0.2435, 0.2616]


class Cifar(Dataset):
    """examples/cifar10_fast.toml's chain, in its order: normalise, reflect-pad to 40, random
    32 crop, flip, one 8x8 cutout."""

    def __init__(self, path):
        self.x = np.load(path, mmap_mode="r")
        self.transform = v2.Compose(
            [
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(MEAN, STD),
                v2.Pad(4, padding_mode="reflect"),
                v2.RandomCrop(32),
                v2.RandomHorizontalFlip(),
                v2.RandomErasing(p=1.0, scale=(0.0625, 0.0625), ratio=(1.0, 1.0), value=0),
            ]
        )

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        image = torch.from_numpy(np.array(self.x[i])).permute(2, 0, 1)
        return self.transform(image), i % 10


class Folder(Dataset):
    """The ImageNet chain: JPEG decode, RandomResizedCrop 224, flip, colour jitter."""

    def __init__(self, root):
        self.files = sorted(
            os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg")
        )
        self.transform = v2.Compose(
            [
                v2.RandomResizedCrop(224, antialias=True),
                v2.RandomHorizontalFlip(),
                v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
            ]
        )

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return self.transform(decode_jpeg(read_file(self.files[i]))), i % 2


def main():
    kind, workers, batch, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    start = time.perf_counter()
    dataset = Cifar(path) if kind == "cifar" else Folder(path)
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers)
    samples = 0
    for _, y in loader:
        samples += len(y)
    print(samples, time.perf_counter() - start)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
