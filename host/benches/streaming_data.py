"""Writes the streaming benchmark's data: `samples` JPEG images (smooth gradients with noise,
so they compress like photographs) with a class label, as WebDataset tar shards of 1000
samples, and a Parquet table of float feature rows, in row groups of 2000 rows.

usage: streaming_data.py OUT SAMPLES SIZE
"""

import io
import os
import sys
import tarfile
from multiprocessing import Pool

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

PER_SHARD = 1000
FEATURES = 256
ROW_GROUP = 2000


def member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_shard(args):
    out, shard, size = args
    rng = np.random.default_rng(shard)
    ramp = np.linspace(0, 255, size, dtype=np.float32)
    path = os.path.join(out, "shards", f"train-{shard:06d}.tar")
    with tarfile.open(path + ".part", "w") as tar:
        for i in range(shard * PER_SHARD, (shard + 1) * PER_SHARD):
            tilt = rng.uniform(0.2, 1.0, 3)
            base = (ramp[None, :, None] * tilt + ramp[:, None, None] * (1 - tilt)) % 256
            noise = rng.integers(0, 24, (size, size, 3))
            pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
            encoded = io.BytesIO()
            Image.fromarray(pixels).save(encoded, format="JPEG", quality=90)
            member(tar, f"{i:09d}.jpg", encoded.getvalue())
            member(tar, f"{i:09d}.cls", str(i % 10).encode())
    os.replace(path + ".part", path)


def write_parquet(out, samples):
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(out, "parquet"), exist_ok=True)
    per_file = 10_000
    for start in range(0, samples, per_file):
        rows = min(per_file, samples - start)
        x = rng.standard_normal((rows, FEATURES), dtype=np.float32)
        table = pa.table(
            {
                "x": pa.ListArray.from_arrays(
                    np.arange(0, rows * FEATURES + 1, FEATURES, dtype=np.int32),
                    pa.array(x.reshape(-1)),
                ),
                "y": pa.array(np.arange(start, start + rows) % 10, pa.int64()),
            }
        )
        name = os.path.join(out, "parquet", f"part-{start // per_file:05d}.parquet")
        pq.write_table(table, name, row_group_size=ROW_GROUP)


def main():
    out, samples, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    assert samples % 10_000 == 0, "samples must be a multiple of 10000"
    os.makedirs(os.path.join(out, "shards"), exist_ok=True)
    with Pool(os.cpu_count()) as pool:
        pool.map(write_shard, [(out, s, size) for s in range(samples // PER_SHARD)])
    write_parquet(out, samples)


if __name__ == "__main__":
    main()
