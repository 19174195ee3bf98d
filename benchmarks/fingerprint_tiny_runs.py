"""Fingerprint a seeded tiny PPFT pipeline and a tiny learned-inversion attack cell, to show that a refactor changes
no result.

Runs, through the command line only (the commands do not change when the code moves):

* ``textfree ppft pipeline --preset tiny``: decoder pretraining, stage 1, stage 2 and the evaluation, on a tiny
  random encoder and the test fixtures' data;
* ``textfree run`` of a ``learned_inversion`` cell: an inverter trained (on the shared training loop) from that
  encoder and decoder, scored on held-out prompts;

then prints one JSON object: the sha256 of every safetensors file's tensors and the losses, metrics
and accuracies of every JSON file with its timing fields removed. Run it before and after a change and compare:

    python benchmarks/fingerprint_tiny_runs.py --work /tmp/fp-before > before.json
    python benchmarks/fingerprint_tiny_runs.py --work /tmp/fp-after > after.json
    diff before.json after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "data"
# fields that are times, dates, versions or paths: they differ between any two runs
VOLATILE = (
    "_s",
    "elapsed",
    "time",
    "date",
    "seconds",
    "git",
    "version",
    "path",
    "out",
    "init",
    "created",
    "host",
    "encoder",
    "decoder",
    "model",
    "fingerprint",
    "file",
    "sha256",
    "build",
    "dir",
    "texts",
)


def _textfree(*args: str, env: dict[str, str]) -> None:
    cmd = ["textfree", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def _scrub(value):
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in sorted(value.items()) if not any(s in k.lower() for s in VOLATILE)}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, float):
        return round(value, 6)
    return value


def _json_lines(path: Path):
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [_scrub(json.loads(line)) for line in text.splitlines() if line.strip()]
    return _scrub(json.loads(text))


def _tensor_sha256(path: Path) -> str:
    """sha256 over the tensors' names, dtypes, shapes and bytes (a file's metadata may name its paths)."""
    from safetensors.torch import load_file

    digest = hashlib.sha256()
    for name, tensor in sorted(load_file(path).items()):
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.contiguous().view(-1).view(torch_uint8()).numpy().tobytes())
    return digest.hexdigest()


def torch_uint8():
    import torch

    return torch.uint8


def fingerprint(root: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = re.sub(r"-\d{8}T\d{6}Z", "", str(path.relative_to(root)))  # a result file's time stamp
        if path.suffix == ".safetensors":
            out[rel] = _tensor_sha256(path)
        elif path.suffix in (".json", ".jsonl") and path.name not in ("tokenizer.json", "tokenizer_config.json"):
            out[rel] = _json_lines(path)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="An empty or missing directory for the runs.")
    args = parser.parse_args()
    work = args.work.resolve()
    if work.exists() and any(work.iterdir()):
        sys.exit(f"--work {work} is not empty")
    work.mkdir(parents=True, exist_ok=True)
    env = os.environ | {"TEXTFREE_DATA": str(FIXTURES), "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}

    from textfree.encoders import make_tiny_encoder_dir

    encoder = make_tiny_encoder_dir(work / "encoder", hidden=32, layers=2, heads=2, seed=0)
    words = (
        "patient fever cough pain chest history male female year old reports days weeks treatment answer question "
        "the a of and with has no is was in for on to"
    ).split()
    texts = work / "pretrain.txt"
    texts.write_text("\n\n".join(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(40)) for i in range(60)))
    pipe = work / "pipeline"
    _textfree(
        "ppft",
        "pipeline",
        "--out",
        str(pipe),
        "--encoder",
        str(encoder),
        "--preset",
        "tiny",
        "--pretrain-steps",
        "6",
        "--pretrain-texts",
        str(texts),
        "--stage1-max-steps",
        "3",
        "--stage1-limit-per-source",
        "8",
        "--stage2-epochs",
        "1",
        "--stage2-max-steps",
        "4",
        "--eval-limit",
        "2",
        "--no-progress",
        env=env,
    )
    cell = {
        "name": "fp_inversion",
        "kind": "learned_inversion",
        "dataset": "pri-ddx",
        "params": {
            "variant": "aware",
            "init": {"encoder": str(encoder), "decoder": str(pipe / "decoder")},
            "out": str(work / "inv-{epsilon}"),
            "epochs": 1,
            "train_limit": 8,
            "eval_limit": 3,
            "max_new_tokens": 6,
            "max_target_tokens": 24,
            "prior_sample": 5,
        },
        "attack": {
            "threat": {
                "encoder_queries": True,
                "training_text": "in_domain",
                "knows_mechanism": True,
                "knows_parameters": True,
            }
        },
        "grid": {"params.epsilon": [75]},
        "seeds": [0],
    }
    (work / "cell.json").write_text(json.dumps(cell))
    _textfree("run", str(work / "cell.json"), "--out-dir", str(work / "results"), env=env)
    print(
        json.dumps(
            {
                "pipeline": fingerprint(pipe),
                "inversion": fingerprint(work / "inv-75"),
                "results": fingerprint(work / "results"),
            },
            indent=1,
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()
