"""Training the learned retrievers (``combiner`` and ``text_only``'s projection) on objects-cir, on a CPU.

Both are trained on frozen features of the train split with a contrastive loss over the whole train
gallery (the reference image masked out), a random hand-written phrasing of each query per epoch, and
the epoch with the best validation R@10 kept. Features are computed once; training itself takes seconds.
The checkpoint is safetensors (float16) with a JSON config beside it that records the encoders, the
hyper-parameters, the validation numbers and the command that made it.

It uses the encoders of :mod:`shiftbench.models.retrieval_encoders`, never :mod:`shiftbench.models.retrieval`
(which imports this module for the combiner's torch module and for training a missing checkpoint).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..datasets.objects_cir import ObjectsCIR
from ..errors import ShiftbenchError
from ..metrics.retrieval import recall_at_k, target_ranks
from ..seeds import check_seed
from .retrieval_encoders import bundled_image_encoder, bundled_text_encoder, normalize, torch_threads

__all__ = ["CombinerNet", "encode_split", "train_retrievers", "TRAIN_DEFAULTS"]

TRAIN_DEFAULTS = {"epochs": 30, "hidden": 256, "dropout": 0.3, "lr": 1e-3, "weight_decay": 1e-2, "batch_size": 64,
                  "seed": 0, "dataset_seed": 0, "image_size": 128}


def _torch_modules():
    import torch
    from torch import nn

    return torch, nn


def _combiner_class():
    torch, nn = _torch_modules()
    F = torch.nn.functional

    class _Net(nn.Module):
        def __init__(self, image_dim: int, text_dim: int, hidden: int = 256, dropout: float = 0.3):
            super().__init__()
            self.image_dim, self.text_dim, self.hidden = image_dim, text_dim, hidden
            self.image_proj = nn.Linear(image_dim, hidden)
            self.text_proj = nn.Linear(text_dim, hidden)
            self.text_to_image = nn.Linear(text_dim, image_dim)
            self.mix_in = nn.Linear(2 * hidden, 2 * hidden)
            self.mix_out = nn.Linear(2 * hidden, image_dim)
            self.gate_in = nn.Linear(2 * hidden, hidden)
            self.gate_out = nn.Linear(hidden, 1)
            self.drop = nn.Dropout(dropout)

        def forward(self, image: Any, text: Any) -> Any:
            h = torch.cat([self.drop(F.relu(self.image_proj(image))), self.drop(F.relu(self.text_proj(text)))], dim=1)
            lam = torch.sigmoid(self.gate_out(self.drop(F.relu(self.gate_in(h)))))
            residual = self.mix_out(self.drop(F.relu(self.mix_in(h))))
            out = residual + lam * F.normalize(self.text_to_image(text), dim=-1) + (1 - lam) * image
            return F.normalize(out, dim=-1)

    return _Net


class CombinerNet:
    """Factory for the combiner module (a torch ``nn.Module``; torch is imported only when one is built)."""

    def __new__(cls, image_dim: int, text_dim: int, hidden: int = 256, dropout: float = 0.3) -> Any:
        return _combiner_class()(image_dim, text_dim, hidden, dropout)

    @staticmethod
    def from_weights(weights: dict[str, np.ndarray]) -> Any:
        """The eval-mode module from checkpoint tensors (``combiner.*``); dims read from the shapes."""
        torch, _ = _torch_modules()
        state = {k[len("combiner."):]: torch.from_numpy(np.ascontiguousarray(v, np.float32))
                 for k, v in weights.items() if k.startswith("combiner.")}
        if "image_proj.weight" not in state or "text_proj.weight" not in state:
            raise ShiftbenchError("the checkpoint has no combiner weights")
        hidden, image_dim = state["image_proj.weight"].shape
        text_dim = state["text_proj.weight"].shape[1]
        net = CombinerNet(int(image_dim), int(text_dim), int(hidden))
        try:
            net.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise ShiftbenchError(f"combiner checkpoint does not fit the module: {str(exc).splitlines()[0]}") from None
        return net.eval()


def encode_split(split: str, image_encoder: Any, text_encoder: Any, dataset_seed: int = 0,
                 all_phrasings: bool = False) -> dict[str, Any]:
    """Features of an objects-cir split: gallery (G, D), reference and target indices, text features.

    With ``all_phrasings`` the texts are every phrasing of every query (``texts[i]`` a (P_i, E) array).
    """
    ds = ObjectsCIR(split=split, seed=dataset_seed)
    ids = ds.gallery_ids()
    index = {g: i for i, g in enumerate(ids)}
    gallery = normalize(image_encoder.encode([ds.load_gallery(g).image for g in ids]))
    queries = [ds._queries[i] for i in range(len(ds))]
    refs = np.array([index[q["reference"]] for q in queries])
    targets = np.array([index[q["target"]] for q in queries])
    if all_phrasings:
        groups = [ds.phrasings(i) for i in range(len(ds))]
        flat = normalize(text_encoder.encode([t for g in groups for t in g]))
        bounds = np.cumsum([0] + [len(g) for g in groups])
        texts = [flat[bounds[i]:bounds[i + 1]] for i in range(len(groups))]
    else:
        texts = [row[None] for row in normalize(text_encoder.encode([q["text"] for q in queries]))]
    return {"gallery": gallery, "refs": refs, "targets": targets, "texts": texts,
            "categories": [q["category"] for q in queries]}


def _fit(model: Any, forward: Callable, train: dict, val: dict, settings: dict, log: Callable) -> tuple[Any, dict]:
    """AdamW on the contrastive loss; returns the module at its best validation R@10 and the history."""
    import copy

    torch, _ = _torch_modules()
    rng = np.random.default_rng(settings["seed"])
    gallery = torch.from_numpy(train["gallery"])
    val_gallery = torch.from_numpy(val["gallery"])
    val_images = torch.from_numpy(val["gallery"][val["refs"]])
    val_texts = torch.from_numpy(np.concatenate([t[:1] for t in val["texts"]]))
    log_scale = torch.nn.Parameter(torch.tensor(float(np.log(30.0))))
    opt = torch.optim.AdamW(list(model.parameters()) + [log_scale], lr=settings["lr"],
                            weight_decay=settings["weight_decay"])
    n = len(train["refs"])
    best, best_state, history = -1.0, None, []
    for epoch in range(settings["epochs"]):
        model.train()
        order = rng.permutation(n)
        picks = np.array([rng.integers(len(train["texts"][i])) for i in range(n)])
        total = 0.0
        for start in range(0, n, settings["batch_size"]):
            idx = order[start:start + settings["batch_size"]]
            images = gallery[train["refs"][idx]]
            texts = torch.from_numpy(np.stack([train["texts"][i][picks[i]] for i in idx]))
            logits = log_scale.exp().clamp(max=100.0) * forward(model, images, texts) @ gallery.T
            rows = torch.arange(len(idx))
            logits[rows, torch.from_numpy(train["refs"][idx])] = float("-inf")  # the reference is never a target
            loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(train["targets"][idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        model.eval()
        with torch.no_grad():
            scores = (forward(model, val_images, val_texts) @ val_gallery.T).numpy()
        r10 = recall_at_k(target_ranks(scores, val["targets"], val["refs"]), (10,))["R@10"]
        history.append({"epoch": epoch + 1, "loss": round(total / n, 5), "val_R@10": round(r10, 5)})
        if r10 > best:
            best, best_state = r10, copy.deepcopy(model.state_dict())
        if (epoch + 1) % 10 == 0:
            log(f"  epoch {epoch + 1}: loss {total / n:.4f}, val R@10 {r10:.4f}")
    model.load_state_dict(best_state)
    best_epoch = max(history, key=lambda h: (h["val_R@10"], -h["epoch"]))["epoch"]
    return model.eval(), {"best_val_R@10": round(best, 5), "best_epoch": best_epoch, "history": history}


def train_retrievers(out: Any, log: Callable[[str], None] | None = None, command: str | None = None,
                     **overrides: Any) -> dict[str, Any]:
    """Train ``text_only``'s projection and the ``combiner`` on objects-cir train; save to ``out``.

    ``out`` is the ``.safetensors`` path; the config goes to the same name with ``.json``. Returns the config.
    """
    with torch_threads():
        return _train(out, log, command, overrides)


def _train(out: Any, log: Callable[[str], None] | None, command: str | None, overrides: dict) -> dict[str, Any]:
    from safetensors.numpy import save_file

    unknown = set(overrides) - set(TRAIN_DEFAULTS)
    if unknown:
        raise ShiftbenchError(f"train_retrievers: unknown settings {sorted(unknown)}; known: {', '.join(TRAIN_DEFAULTS)}")
    settings = {**TRAIN_DEFAULTS, **overrides}
    for key in ("seed", "dataset_seed"):  # before any work; the checkpoint records them as given
        settings[key] = check_seed(settings[key], f"train_retrievers: {key}")
    log = log or (lambda message: None)
    out = Path(out)
    if out.suffix != ".safetensors":
        raise ShiftbenchError(f"{out}: the checkpoint path must end in .safetensors")
    out.parent.mkdir(parents=True, exist_ok=True)
    torch, nn = _torch_modules()
    torch.manual_seed(settings["seed"])
    t0 = time.perf_counter()
    image_encoder = bundled_image_encoder(0, settings["image_size"])
    text_encoder = bundled_text_encoder()
    log("encoding objects-cir train (every phrasing) and val ...")
    train = encode_split("train", image_encoder, text_encoder, settings["dataset_seed"], all_phrasings=True)
    val = encode_split("val", image_encoder, text_encoder, settings["dataset_seed"])
    t_features = time.perf_counter() - t0
    image_dim, text_dim = train["gallery"].shape[1], train["texts"][0].shape[1]

    log("training text_only projection ...")
    projection = nn.Linear(text_dim, image_dim)
    projection, text_report = _fit(projection, lambda m, i, t: torch.nn.functional.normalize(m(t), dim=-1),
                                   train, val, settings, log)
    log("training combiner ...")
    combiner = CombinerNet(image_dim, text_dim, settings["hidden"], settings["dropout"])
    combiner, comb_report = _fit(combiner, lambda m, i, t: m(i, t), train, val, settings, log)

    tensors = {f"text_only.{k}": v.detach().numpy().astype(np.float16) for k, v in projection.state_dict().items()}
    tensors.update({f"combiner.{k}": v.detach().numpy().astype(np.float16) for k, v in combiner.state_dict().items()})
    config = {
        "format": "shiftbench-cir-retrievers/1", "image_encoder": image_encoder.key, "text_encoder": text_encoder.key,
        "image_dim": int(image_dim), "text_dim": int(text_dim), "dtype": "float16", "settings": settings,
        "train": {"dataset": "objects-cir", "split": "train", "queries": len(train["refs"]),
                  "gallery": len(train["gallery"])},
        "val": {"queries": len(val["refs"]), "gallery": len(val["gallery"])},
        "text_only": {k: v for k, v in text_report.items() if k != "history"},
        "combiner": {k: v for k, v in comb_report.items() if k != "history"},
        "seconds": {"features": round(t_features, 1), "total": round(time.perf_counter() - t0, 1)},
        "command": command or "shiftbench train-retriever",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    tmp = out.with_name(out.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"config": json.dumps(config, sort_keys=True)})
    out.with_suffix(".json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(out)  # the weights appear last: a present .safetensors always has its config
    log(f"saved {out} ({out.stat().st_size / 1e6:.1f} MB) in {config['seconds']['total']} s: "
        f"val R@10 text_only {text_report['best_val_R@10']}, combiner {comb_report['best_val_R@10']}")
    return config
