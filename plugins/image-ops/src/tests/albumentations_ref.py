"""Reference outputs for fe-image-ops' tests, from albumentations (and OpenCV).

Usage: albumentations_ref.py SPEC.json. SPEC is a list of cases; each reads its `image`
(and optional `mask`) .npy file and writes the transformed arrays to `out_image` /
`out_mask`. `kind` says how the transform runs:
  compose  A.Compose([A.<transform>(**init, p=1)]) on image (and mask): deterministic ops;
  apply    A.<transform>(**init).apply(image, **params) / .apply_to_mask: a random op with
           the parameters the Rust op reports it drew;
  cv2      cv2.<transform>(image, *params["args"]);
  jpeg     cv2.imencode / imdecode of an RGB or gray image at params["quality"], with
           params["sampling"] ("444" or "420", OpenCV's default) chroma subsampling;
  grid     GridDistortion's (map_x, map_y), stacked, for image `shape` and stretches
           params["steps_x"] / ["steps_y"], normalised if params["normalized"];
  elastic  ElasticTransform's (map_x, map_y), stacked, for image `shape` with the noise
           params["noise"] in place of numpy's draws;
  motion_kernel  albumentations' create_motion_kernel(params["size"], params["angle"],
           params["direction"]) with the shift draws params["shift"] in place of its RNG;
  targets  A.Compose([A.<transform>(**init, p=1)], bbox_params=A.BboxParams(**bbox_params),
           keypoint_params=A.KeypointParams(format="xy")) on image, `bboxes` and `keypoints`
           (.npy files, [N, 4 + k] / [N, 2 + k]), writing `out_bboxes` / `out_keypoints` too;
           with `params`, the transform uses them in place of its own draws;
  sample   draws `n` parameter sets for an image of `shape` and writes params[key] of each
           as one row of `out_image`: the parameter distribution.
"""

import json
import sys

from albumentations.augmentations.blur import functional as fblur
from albumentations.augmentations.geometric import functional as fgeometric

import albumentations as A
import cv2
import numpy as np

ARRAYS = {"holes", "noise_map", "matrix", "bbox_matrix", "kernel", "map_x", "map_y", "sharpening_matrix"}


def arrays(params):
    return {k: np.array(v) if k in ARRAYS and isinstance(v, list) else v for k, v in params.items()}


class Noise:
    """Stands in for numpy's Generator: returns the given noise."""

    def __init__(self, noise):
        self.noise = np.array(noise, dtype=np.float32)

    def standard_normal(self, shape, dtype):
        return self.noise.reshape(shape).astype(dtype)

    def uniform(self, low, high, size):
        return self.noise.reshape(size).astype(np.float64)


class Draws:
    """Stands in for random.Random: uniform() returns the given draws in order."""

    def __init__(self, draws):
        self.draws = list(draws)

    def uniform(self, a, b):
        return self.draws.pop(0)


def jpeg(image, quality, sampling):
    factor = {"444": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444, "420": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420}[sampling]
    flags = (cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, factor)
    if image.ndim == 3 and image.shape[2] == 3:
        _, encoded = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR), flags)
        return cv2.cvtColor(cv2.imdecode(encoded, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    _, encoded = cv2.imencode(".jpg", image, flags)
    return cv2.imdecode(encoded, cv2.IMREAD_GRAYSCALE).reshape(image.shape)


def run(case):
    kind, name = case["kind"], case["transform"]
    init = case.get("init", {})
    if kind == "grid":
        p = case["params"]
        steps_x, steps_y, n = list(p["steps_x"]), list(p["steps_y"]), p["num_steps"]
        if p["normalized"]:
            steps = fgeometric.normalize_grid_distortion_steps(p["shape"], n, steps_x, steps_y)
            steps_x, steps_y = steps["steps_x"], steps["steps_y"]
        map_x, map_y = fgeometric.generate_grid(p["shape"], steps_x, steps_y, n)
        np.save(case["out_image"], np.stack([map_x, map_y]))
        return
    if kind == "elastic":
        p = case["params"]
        h, w = p["shape"]
        dx, dy = fgeometric.generate_displacement_fields(
            (h, w), p["alpha"], p["sigma"], p["same_dxdy"], (17, 17) if p["approximate"] else (0, 0),
            Noise(p["noise"]), p["noise_distribution"],
        )
        maps = np.stack(np.meshgrid(np.arange(w), np.arange(h))) + np.stack([dx, dy])
        np.save(case["out_image"], maps.astype(np.float32))
        return
    if kind == "motion_kernel":
        p = case["params"]
        shift = p.get("shift")
        kernel = fblur.create_motion_kernel(p["size"], p["angle"], p["direction"], shift is not None, Draws(shift or []))
        np.save(case["out_image"], kernel.astype(np.float32) / np.sum(kernel))
        return
    if kind == "sample":
        t = getattr(A, name)(**init)
        t.set_random_seed(case.get("seed", 0))
        rows = []
        for _ in range(case["n"]):
            params = t.get_params()
            params["shape"] = tuple(case["shape"])
            params.update(t.get_params_dependent_on_data(params, {"image": np.zeros(case["shape"], np.uint8)}))
            rows.append(np.asarray(params[case["key"]], dtype=np.float64).ravel())
        width = max(len(r) for r in rows)  # kernels differ in length: pad with NaN
        rows = [np.pad(r, (0, width - len(r)), constant_values=np.nan) for r in rows]
        np.save(case["out_image"], np.stack(rows))
        return
    image = np.load(case["image"])
    if kind == "targets":
        targets(case, name, init, image)
        return
    mask = np.load(case["mask"]) if case.get("mask") else None
    if kind == "compose":
        t = A.Compose([getattr(A, name)(**init, p=1.0)])
        data = {"image": image} if mask is None else {"image": image, "mask": mask}
        out = t(**data)
        out_image, out_mask = out["image"], out.get("mask")
    elif kind == "apply":
        t = getattr(A, name)(**init)
        params = arrays(case["params"])
        if name == "MotionBlur":  # albumentations hands cv2.filter2D a float32 kernel
            params["kernel"] = params["kernel"].astype(np.float32)
        for key in ("map_x", "map_y"):  # its distortion maps are float32
            if key in params:
                params[key] = params[key].astype(np.float32)
        out_image = t.apply(image, **params)
        out_mask = None if mask is None else t.apply_to_mask(mask, **params)
    elif kind == "jpeg":
        out_image, out_mask = jpeg(image, case["params"]["quality"], case["params"]["sampling"]), None
    elif kind == "cv2":
        f = getattr(cv2, name)
        out_image = f(image, *case["params"]["args"])
        out_mask = None if mask is None else f(mask, *case["params"]["args"])
    else:
        raise ValueError(f"unknown kind {kind}")
    np.save(case["out_image"], np.ascontiguousarray(out_image))
    if out_mask is not None:
        np.save(case["out_mask"], np.ascontiguousarray(out_mask))


def targets(case, name, init, image):
    t = getattr(A, name)(**init, p=1.0)
    fixed = arrays(case["params"]) if case.get("params") else None
    if fixed:  # the parameters the Rust op drew, in place of albumentations' own draws
        if "output_shape" in fixed:
            fixed["output_shape"] = tuple(fixed["output_shape"])
        t.get_params = lambda: dict(fixed)
        t.get_params_dependent_on_data = lambda params, data: {}
    compose = A.Compose(
        [t],
        bbox_params=A.BboxParams(**case["bbox_params"]),
        keypoint_params=A.KeypointParams(format="xy"),
    )
    out = compose(
        image=image,
        bboxes=np.load(case["bboxes"]).astype(np.float32),
        keypoints=np.load(case["keypoints"]).astype(np.float32),
    )
    np.save(case["out_image"], np.ascontiguousarray(out["image"]))
    for key in ("bboxes", "keypoints"):
        rows = np.asarray(out[key], dtype=np.float64)
        np.save(case[f"out_{key}"], rows.reshape(len(rows), -1) if len(rows) else np.zeros((0, 0)))


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    for case in cases:
        try:
            run(case)
        except Exception as e:
            raise SystemExit(f"{case['transform']} ({case['kind']}): {e!r}") from e


if __name__ == "__main__":
    main()
