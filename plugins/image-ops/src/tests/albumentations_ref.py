"""Reference outputs for fe-image-ops' tests, from albumentations (and OpenCV).

Usage: albumentations_ref.py SPEC.json. SPEC is a list of cases; each reads its `image`
(and optional `mask`) .npy file and writes the transformed arrays to `out_image` /
`out_mask`. `kind` says how the transform runs:
  compose  A.Compose([A.<transform>(**init, p=1)]) on image (and mask): deterministic ops;
  apply    A.<transform>(**init).apply(image, **params) / .apply_to_mask: a random op with
           the parameters the Rust op reports it drew;
  cv2      cv2.<transform>(image, *params["args"]);
  sample   draws `n` parameter sets for an image of `shape` and writes params[key] of each
           as one row of `out_image`: the parameter distribution.
"""

import json
import sys

import albumentations as A
import cv2
import numpy as np

ARRAYS = {"holes", "noise_map", "matrix", "kernel"}


def arrays(params):
    return {k: np.array(v) if k in ARRAYS and isinstance(v, list) else v for k, v in params.items()}


def run(case):
    kind, name = case["kind"], case["transform"]
    init = case.get("init", {})
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
    mask = np.load(case["mask"]) if case.get("mask") else None
    if kind == "compose":
        t = A.Compose([getattr(A, name)(**init, p=1.0)])
        data = {"image": image} if mask is None else {"image": image, "mask": mask}
        out = t(**data)
        out_image, out_mask = out["image"], out.get("mask")
    elif kind == "apply":
        t = getattr(A, name)(**init)
        params = arrays(case["params"])
        out_image = t.apply(image, **params)
        out_mask = None if mask is None else t.apply_to_mask(mask, **params)
    elif kind == "cv2":
        f = getattr(cv2, name)
        out_image = f(image, *case["params"]["args"])
        out_mask = None if mask is None else f(mask, *case["params"]["args"])
    else:
        raise ValueError(f"unknown kind {kind}")
    np.save(case["out_image"], np.ascontiguousarray(out_image))
    if out_mask is not None:
        np.save(case["out_mask"], np.ascontiguousarray(out_mask))


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
