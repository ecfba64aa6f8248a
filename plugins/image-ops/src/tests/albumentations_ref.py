"""Reference outputs for fe-image-ops' tests, from albumentations (and OpenCV).

Usage: albumentations_ref.py SPEC.json. SPEC is a list of cases; each reads its `image`
(and optional `mask`) .npy file and writes the transformed arrays to `out_image` /
`out_mask`. `kind` says how the transform runs:
  compose  A.Compose([A.<transform>(**init, p=1)]) on image (and mask): deterministic ops,
           or with params["normals"] Perspective's corner normals in place of numpy's;
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
           keypoint_params=A.KeypointParams(**keypoint_params), format "xy" unless given)
           on image, `bboxes` and `keypoints`
           (.npy files, [N, 4 + k] / [N, 2 + k]), writing `out_bboxes` / `out_keypoints` too;
           with `params`, the transform uses them in place of its own draws (params["normals"]:
           only Perspective's corner normals, the rest computed as albumentations does; a
           target the transform requires, e.g. params["cropping_bbox"], also goes in as data);
  iso_noise  albumentations' iso_noise(image, params["color_shift"], params["intensity"]) with
           the Poisson counts params["counts"] and hue noise params["hues"] in place of numpy's;
  grid_mask  FastEstimator's GridMask (its own numpy + OpenCV code, not albumentations'; not
           installed here, so restated in `grid_mask` below) for the drawn params["d"],
           ["offset_y"], ["offset_x"], ["angle"]; the mask gets params["mask_fill"];
  grid_mask_draws  FastEstimator's draws for GridMask with numpy's global RNG: params["n"]
           rows of (d, offset_y, offset_x, angle);
  perspective_params  Perspective's order_points + compute_perspective_params for the corners
           params["points"] (pixels, tl tr br bl before ordering) of image `shape`, then
           expand_transform if params["fit_output"]: the matrix, max_width, max_height, flattened;
  piecewise_maps  PiecewiseAffine's (map_x, map_y), stacked, from create_piecewise_affine_maps
           for image params["shape"], grid params["rows"] x ["cols"], params["scale"] and
           ["absolute_scale"], with the jitter params["jitter"] in place of numpy's normals
           (failing unless it asks for standard deviation params["jitter_scale"]);
  optical_maps  OpticalDistortion's (map_x, map_y), stacked, for image params["shape"],
           params["k"] and params["mode"];
  tps_maps  ThinPlateSpline's (map_x, map_y), stacked, for image params["shape"] and
           params["num_control_points"], with the offsets params["offsets"] in place of its
           normal draws;
  numpy_draws  numpy's own draws, for distribution checks: params["n"] values of
           Generator.poisson(params["lam"]) and of .normal(0, params["sigma"]), stacked;
  sample   draws `n` parameter sets for an image of `shape` (and the `mask`, if given) and
           writes params[key] of each as one row of `out_image`: the parameter distribution;
           `data` adds targets the draw reads (normalised float32 `bboxes`,
           RandomCropNearBBox's `cropping_bbox`).
"""

import json
import sys

from albumentations.augmentations.blur import functional as fblur
from albumentations.augmentations.geometric import functional as fgeometric
from albumentations.augmentations.pixel import functional as fpixel

import albumentations as A
import cv2
import numpy as np

ARRAYS = {"holes", "multiplier", "tiles", "dropout_mask", "noise_map", "matrix", "bbox_matrix", "matrix_bbox", "kernel", "map_x", "map_y", "sharpening_matrix", "dxy"}


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


class Fields:
    """Stands in for numpy's Generator in iso_noise: returns the given Poisson and normal fields."""

    def __init__(self, counts, hues):
        self.counts, self.hues = np.array(counts, dtype=np.int64), np.array(hues, dtype=np.float64)

    def poisson(self, lam, size):
        return self.counts.reshape(size)

    def normal(self, loc, scale, size):
        return self.hues.reshape(size)


class Normals:
    """Stands in for numpy's Generator: normal() returns the given draws (Perspective's corners)."""

    def __init__(self, draws):
        self.draws = np.array(draws, dtype=np.float64)

    def normal(self, loc, scale, size):
        return self.draws.reshape(size).copy()


def with_normals(compose, params):
    """The drawn normals, if given, in place of the (only) transform's numpy Generator; after
    Compose, which reseeds its transforms."""
    if params and "normals" in params:
        compose.transforms[0].random_generator = Normals(params["normals"])


class Draws:
    """Stands in for random.Random: uniform() returns the given draws in order."""

    def __init__(self, draws):
        self.draws = list(draws)

    def uniform(self, a, b):
        return self.draws.pop(0)


class Jitter:
    """Stands in for numpy's Generator in create_piecewise_affine_maps: returns the given jitter,
    after checking the normal's parameters it asks for."""

    def __init__(self, jitter, scale):
        self.jitter, self.scale = np.array(jitter, dtype=np.float64), scale

    def normal(self, loc, scale, size):
        if loc != 0 or scale != self.scale:
            raise ValueError(f"asked for N({loc}, {scale}), the jitter is N(0, {self.scale})")
        return self.jitter.reshape(size)


def grid_mask(shape, p):
    """FastEstimator's GridMask keep-mask: squares of int(d * ratio) every d pixels from the
    offsets on a diagonal-sized canvas, rotated with OpenCV (nearest, border 1), centre-cropped."""
    h, w = shape[:2]
    d, side = p["d"], int(p["d"] * p["ratio"])
    diag = int(np.ceil(np.sqrt(h * h + w * w)))
    keep = np.ones((diag, diag), dtype=np.float32)
    for y in range(p["offset_y"] - d, diag, d):
        for x in range(p["offset_x"] - d, diag, d):
            y1, y2, x1, x2 = max(0, y), min(diag, y + side), max(0, x), min(diag, x + side)
            if y1 < y2 and x1 < x2:  # a negative end would index from the back
                keep[y1:y2, x1:x2] = 0
    if p["rotate"]:
        m = cv2.getRotationMatrix2D((diag // 2, diag // 2), p["angle"], 1.0)
        keep = cv2.warpAffine(keep, m, (diag, diag), flags=cv2.INTER_NEAREST, borderValue=1.0)
    top, left = (diag - h) // 2, (diag - w) // 2
    return keep[top:top + h, left:left + w]


def fill_grid(x, keep, fill):
    keep = keep[..., np.newaxis] if x.ndim == 3 else keep
    return np.where(keep > 0.5, x, fill).astype(x.dtype)


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
    if kind == "grid_mask_draws":
        p = case["params"]
        np.random.seed(p.get("seed", 0))
        rows = []
        for _ in range(p["n"]):
            d = np.random.randint(p["d_range"][0], p["d_range"][1] + 1)
            oy, ox = np.random.randint(0, d), np.random.randint(0, d)
            rows.append([d, oy, ox, np.random.uniform(-p["rotate_angle"], p["rotate_angle"])])
        np.save(case["out_image"], np.array(rows, dtype=np.float64))
        return
    if kind == "perspective_params":
        p = case["params"]
        points = fgeometric.order_points(np.array(p["points"], dtype=np.float64))
        matrix, max_w, max_h = fgeometric.compute_perspective_params(points, tuple(p["shape"]))
        if p.get("fit_output"):
            matrix, max_w, max_h = fgeometric.expand_transform(matrix, tuple(p["shape"]))
        np.save(case["out_image"], np.concatenate([matrix.ravel(), [max_w, max_h]]))
        return
    if kind == "optical_maps":
        p = case["params"]
        maps = {"camera": fgeometric.get_camera_matrix_distortion_maps, "fisheye": fgeometric.get_fisheye_distortion_maps}
        map_x, map_y = maps[p["mode"]](tuple(p["shape"]), p["k"])
        np.save(case["out_image"], np.stack([map_x, map_y]).astype(np.float32))
        return
    if kind == "tps_maps":
        p = case["params"]
        t = A.ThinPlateSpline(num_control_points=p["num_control_points"])
        t.random_generator = Fields([], p["offsets"])
        maps = t.get_params_dependent_on_data({"shape": tuple(p["shape"])}, {})
        np.save(case["out_image"], np.stack([maps["map_x"], maps["map_y"]]))
        return
    if kind == "piecewise_maps":
        p = case["params"]
        map_x, map_y = fgeometric.create_piecewise_affine_maps(
            tuple(p["shape"]), (p["rows"], p["cols"]), p["scale"], p["absolute_scale"],
            Jitter(p["jitter"], p["jitter_scale"]),
        )
        np.save(case["out_image"], np.stack([map_x, map_y]))
        return
    if kind == "numpy_draws":
        p = case["params"]
        rng = np.random.default_rng(p.get("seed", 0))
        draws = np.stack([rng.poisson(p["lam"], p["n"]).astype(np.float64), rng.normal(0, p["sigma"], p["n"])])
        np.save(case["out_image"], draws)
        return
    if kind == "sample":
        t = getattr(A, name)(**init)
        t.set_random_seed(case.get("seed", 0))
        extra = {k: np.array(v, dtype=np.float32).reshape(-1, 4) if k == "bboxes" else v for k, v in case.get("data", {}).items()}
        rows = []
        for _ in range(case["n"]):
            params = t.get_params()
            params["shape"] = tuple(case["shape"])
            data = {"image": np.zeros(case["shape"], np.uint8), **extra}
            if case.get("mask"):
                data["mask"] = np.load(case["mask"])
            params.update(t.get_params_dependent_on_data(params, data))
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
        with_normals(t, case.get("params"))
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
    elif kind == "iso_noise":
        p = case["params"]
        out_image = fpixel.iso_noise(image, p["color_shift"], p["intensity"], Fields(p["counts"], p["hues"]))
        out_mask = None
    elif kind == "grid_mask":
        p = case["params"]
        keep = grid_mask(image.shape, p)
        out_image = fill_grid(image, keep, p["fill"])
        out_mask = None if mask is None else fill_grid(mask, keep, p["mask_fill"])
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
    fixed = {k: v for k, v in arrays(case.get("params") or {}).items() if k != "normals"}
    if fixed:  # the parameters the Rust op drew, in place of albumentations' own draws
        for key in ("output_shape", "result_shape"):  # albumentations tells shapes by tuple
            if key in fixed:
                fixed[key] = tuple(fixed[key])
        for key in ("map_x", "map_y"):  # cv2.remap takes float32 maps
            if key in fixed:
                fixed[key] = fixed[key].astype(np.float32)
        t.get_params = lambda: dict(fixed)
        t.get_params_dependent_on_data = lambda params, data: {}
    compose = A.Compose(
        [t],
        bbox_params=A.BboxParams(**case["bbox_params"]),
        keypoint_params=A.KeypointParams(**case.get("keypoint_params", {"format": "xy"})),
    )
    with_normals(compose, case.get("params"))
    data = {"image": image}
    if "mask" in t.targets_as_params:  # MaskDropout: the drawn params already say what goes
        data["mask"] = np.zeros(image.shape[:2], np.uint8)
    for key in t.targets_as_params:  # RandomCropNearBBox's box: required, unread with fixed params
        if key in fixed:
            data[key] = fixed[key]
    out = compose(
        **data,
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
