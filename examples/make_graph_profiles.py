"""Write the graph profiles of the zoo's vision models into examples/ (no download, no real compute).

    python examples/make_graph_profiles.py

Sizes come from shapes on the meta device; times are FLOP-based estimates (rate in each file's
metadata), so the files are the same on every machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

from remat.executor.graph_profile import profile_graph  # noqa: E402
from remat.executor.zoo import vision  # noqa: E402
from remat.schedules import save_profile, simulate  # noqa: E402

MODELS = (
    # (file stem, factory, input shape (batch first))
    ("vgg16", vision.vgg16, (32, 3, 224, 224)),
    ("resnet50", vision.resnet50, (32, 3, 224, 224)),
    ("mobilenetv2", vision.mobilenet_v2, (32, 3, 224, 224)),
    ("unet", vision.unet, (8, 3, 256, 256)),
)


def main() -> None:
    for stem, factory, shape in MODELS:
        with torch.device("meta"):
            model = factory()
        profile = profile_graph(model, shape, name=f"{stem}-b{shape[0]}-fx", time_source="flops")
        path = ROOT / f"graph_{stem}.json"
        save_profile(profile, path)
        ops = [("compute", v) for v in range(profile.size)]
        peak = simulate(profile, ops, timeline=False).peak_memory
        print(f"{path.name}: {profile.size} nodes, {len(profile.edges)} edges, store-all peak {peak / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
