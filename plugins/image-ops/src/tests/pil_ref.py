"""Reference outputs for fe-image-ops' PIL-based ops (Brightness ... TranslateY, RUA), from PIL.

Usage: pil_ref.py SPEC.json. SPEC is a list of cases {"image", "out", "steps"}: the uint8 .npy
`image` goes through each [name, value] of `steps` in turn and the result is written to `out`.
The functions restate FastEstimator's `_apply_*` static methods (FastEstimator itself is not
installed here): its univariate brightness.py, color.py, contrast.py, sharpness.py, shear_x.py,
shear_y.py, translate_x.py, translate_y.py, autocontrast.py and rua.py's Rotate, Equalize,
Posterize (albumentations' posterize: value & ~(2^(8-bits) - 1)) and Solarize.
"""

import json
import sys

import numpy as np
from PIL import Image, ImageEnhance, ImageOps, ImageTransform


def enhance(kind):
    def apply(data, factor):
        return np.array(getattr(ImageEnhance, kind)(Image.fromarray(data)).enhance(factor))

    return apply


def shear_x(data, s):
    im = Image.fromarray(data)
    width, height = im.size
    xshift = round(abs(s) * width)
    im = im.transform((width + xshift, height),
                      ImageTransform.AffineTransform((1.0, s, -xshift if s > 0 else 0.0, 0.0, 1.0, 0.0)),
                      resample=Image.BICUBIC)
    return np.array(im.resize((width, height)))


def shear_y(data, s):
    im = Image.fromarray(data)
    width, height = im.size
    yshift = round(abs(s) * height)
    im = im.transform((width, height + yshift),
                      ImageTransform.AffineTransform((1.0, 0.0, 0.0, s, 1.0, -yshift if s > 0 else 0.0)),
                      resample=Image.BICUBIC)
    return np.array(im.resize((width, height)))


def translate_x(data, factor):
    im = Image.fromarray(data)
    width, height = im.size
    im = im.transform((width, height), ImageTransform.AffineTransform((1.0, 0.0, factor * width, 0.0, 1.0, 0.0)),
                      resample=Image.BICUBIC)
    return np.array(im)


def translate_y(data, factor):
    im = Image.fromarray(data)
    width, height = im.size
    im = im.transform((width, height), ImageTransform.AffineTransform((1.0, 0.0, 0.0, 0.0, 1.0, factor * height)),
                      resample=Image.BICUBIC)
    return np.array(im)


def posterize(data, bits):
    bits = int(bits)
    if bits == 0:
        return np.zeros_like(data)
    return data & ~np.uint8(2**(8 - bits) - 1)


OPS = {
    "Brightness": enhance("Brightness"),
    "Color": enhance("Color"),
    "Contrast": enhance("Contrast"),
    "Sharpness": enhance("Sharpness"),
    "ShearX": shear_x,
    "ShearY": shear_y,
    "TranslateX": translate_x,
    "TranslateY": translate_y,
    "Rotate": lambda data, degree: np.array(Image.fromarray(data).rotate(degree)),
    "Identity": lambda data, _: data,
    "AutoContrast": lambda data, _: np.array(ImageOps.autocontrast(Image.fromarray(data))),
    "Equalize": lambda data, _: np.array(ImageOps.equalize(Image.fromarray(data))),
    "Posterize": posterize,
    "Solarize": lambda data, threshold: np.where(data < threshold, data, 255 - data),
}


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    for case in spec:
        data = np.load(case["image"])
        # Image.fromarray has no mode for (H, W, 1); the Rust ops take it as "L".
        single = data.ndim == 3 and data.shape[2] == 1
        if single:
            data = data[:, :, 0]
        for name, value in case["steps"]:
            data = OPS[name](data, value)
        if single:
            data = data[:, :, None]
        np.save(case["out"], np.ascontiguousarray(data, dtype=np.uint8))


if __name__ == "__main__":
    main()
