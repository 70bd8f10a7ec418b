"""Where the GPU scripts put their results: one JSON file under the output folder, naming the device."""
from __future__ import annotations

import json
import os

import torch


def save_rows(out: str, name: str, rows: list) -> str:
    """Write {"device": the current GPU's name, "rows": rows} to out/name (the folder made if missing); the path."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    with open(path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return path
