"""fe-host export --format onnx: converts an exported TorchScript file to ONNX.

usage: python -c SOURCE SPEC_JSON

SPEC_JSON: {"torchscript": PATH, "onnx": PATH, "opset": N,
            "inputs": [{"key", "shape", "dtype"}], "outputs": [KEY]}

torch.onnx's TorchScript exporter (dynamo=False: the torch.export-based one does not take a
ScriptModule) with the batch axis of every input and output dynamic. When onnxruntime is
importable the ONNX model is run on two batches and compared with the TorchScript module.
Prints one JSON line: {"checked": bool, "max_abs_difference": float|null}. Fails with one
line on stderr.
"""

import json
import sys
import warnings

TOLERANCE = 1e-4


def fail(message):
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    print(lines[0] if lines else "failed", file=sys.stderr)
    sys.exit(1)


def main():
    spec = json.loads(sys.argv[1])
    import torch

    dtypes = {
        "Float": torch.float32, "Double": torch.float64, "Half": torch.float16,
        "BFloat16": torch.bfloat16, "Int64": torch.int64, "Int": torch.int32,
        "Int16": torch.int16, "Int8": torch.int8, "Uint8": torch.uint8, "Bool": torch.bool,
    }
    module = torch.jit.load(spec["torchscript"], map_location="cpu")
    module.eval()
    generator = torch.Generator().manual_seed(0)

    def batch(size):
        made = []
        for entry in spec["inputs"]:
            dtype = dtypes.get(entry["dtype"])
            if dtype is None:
                fail(f"input `{entry['key']}`: dtype {entry['dtype']} has no ONNX input here")
            shape = [size] + list(entry["shape"])
            if dtype.is_floating_point:
                made.append(torch.rand(shape, generator=generator).to(dtype))
            else:
                # Zeros are a valid id for every token model and a valid value for any integer.
                made.append(torch.zeros(shape, dtype=dtype))
        return tuple(made)

    inputs = [e["key"] for e in spec["inputs"]]
    outputs = list(spec["outputs"])
    axes = {name: {0: "batch"} for name in inputs + outputs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                module, batch(2), spec["onnx"], dynamo=False, input_names=inputs,
                output_names=outputs, dynamic_axes=axes, opset_version=spec["opset"],
            )
        except Exception as error:  # noqa: BLE001 - reported as one line
            fail(f"torch.onnx.export: {type(error).__name__}: {error}")
    try:
        import onnxruntime
    except ImportError:
        print(json.dumps({"checked": False, "max_abs_difference": None}))
        return
    session = onnxruntime.InferenceSession(spec["onnx"], providers=["CPUExecutionProvider"])
    largest = 0.0
    for size in (2, 3):
        args = batch(size)
        with torch.no_grad():
            expected = module(*args)
        if isinstance(expected, torch.Tensor):
            expected = (expected,)
        got = session.run(None, {name: t.numpy() for name, t in zip(inputs, args)})
        for e, g in zip(expected, got):
            e = e.double()
            g = torch.from_numpy(g).double()
            if tuple(e.shape) != tuple(g.shape):
                fail(f"onnxruntime gives shape {tuple(g.shape)}, TorchScript {tuple(e.shape)}")
            if e.numel():
                largest = max(largest, (e - g).abs().max().item())
    if not largest <= TOLERANCE:
        fail(f"onnxruntime's outputs differ from the TorchScript module's by {largest:.3e} (at most {TOLERANCE:g} allowed)")
    print(json.dumps({"checked": True, "max_abs_difference": largest}))


if __name__ == "__main__":
    main()
