"""The Python side of the streaming benchmark: the same data and work through the tools a
PyTorch user reaches for, in a DataLoader with the same worker count and batch size. Prints
`samples seconds`, timed from building the dataset to the end of one epoch.

usage: streaming_ref.py webdataset WORKERS BATCH SHARD...
       streaming_ref.py parquet WORKERS BATCH FILE...
"""

import sys
import time

import numpy as np
import pyarrow.parquet as pq
import torch
import webdataset as wds
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torchvision.transforms import v2


def webdataset_loader(shards, workers, batch):
    # The fe-host manifest's chain: decode, RandomCrop 112, HorizontalFlip, Normalize, CHW.
    transform = v2.Compose(
        [
            v2.PILToTensor(),
            v2.RandomCrop(112),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25]),
        ]
    )
    dataset = (
        wds.WebDataset(shards, shardshuffle=len(shards), nodesplitter=wds.split_by_node, empty_check=False)
        .shuffle(1000)
        .decode("pil")
        .to_tuple("jpg", "cls")
        .map_tuple(transform, int)
    )
    return DataLoader(dataset, batch_size=batch, num_workers=workers)


class RowGroups(IterableDataset):
    """A Parquet table read a row group at a time, the groups split among the workers and
    visited in a seeded order, rows shuffled within a group: what fe-host does."""

    def __init__(self, files):
        self.units = [(f, g) for f in files for g in range(pq.ParquetFile(f).num_row_groups)]

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        rng = np.random.default_rng(0)
        order = rng.permutation(len(self.units))
        for k in order[worker::workers]:
            path, group = self.units[k]
            table = pq.ParquetFile(path).read_row_group(group, columns=["x", "y"])
            x = table.column("x").combine_chunks()
            # One copy per row group: Arrow's buffers are read-only, torch wants writable.
            x = x.flatten().to_numpy().reshape(len(table), -1).copy()
            y = table.column("y").to_numpy()
            for i in rng.permutation(len(table)):
                yield torch.from_numpy(x[i]), int(y[i])


def main():
    kind, workers, batch, paths = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    start = time.perf_counter()
    if kind == "webdataset":
        loader = webdataset_loader(paths, workers, batch)
    else:
        loader = DataLoader(RowGroups(paths), batch_size=batch, num_workers=workers)
    samples = 0
    for _, y in loader:
        samples += len(y)
    print(samples, time.perf_counter() - start)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
