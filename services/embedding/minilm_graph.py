"""Build an ONNX graph of a BERT sentence encoder from its safetensors weights.

The MiniLM weights ship as a pip package in safetensors form only; exporting
them through torch would pull gigabytes of packages into every install. BERT's
forward pass is a few dozen standard ONNX ops, so we write the graph directly
and let ONNX Runtime fuse it (layer norm, GELU, attention) at load time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

_OPSET = 17


@dataclass(frozen=True)
class BertShape:
    hidden: int
    heads: int
    layers: int
    eps: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class _GraphBuilder:
    """Accumulates nodes and initializers; names are generated, never reused."""

    def __init__(self, weights: dict[str, npt.NDArray[np.float32]]) -> None:
        self.weights = weights
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def _name(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n}"

    def const(self, value: npt.ArrayLike, prefix: str = "c") -> str:
        name = self._name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, key: str, transpose: bool = False) -> str:
        array = self.weights[key]
        return self.const(array.T.copy() if transpose else array, key.replace(".", "_"))

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        out = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def linear(self, x: str, prefix: str) -> str:
        y = self.op("MatMul", x, self.weight(f"{prefix}.weight", transpose=True))
        return self.op("Add", y, self.weight(f"{prefix}.bias"))

    def layer_norm(self, x: str, prefix: str, eps: float) -> str:
        return self.op(
            "LayerNormalization",
            x,
            self.weight(f"{prefix}.weight"),
            self.weight(f"{prefix}.bias"),
            axis=-1,
            epsilon=eps,
        )

    def gelu(self, x: str) -> str:
        scaled = self.op("Div", x, self.const(np.float32(math.sqrt(2.0))))
        erf = self.op("Erf", scaled)
        one_plus = self.op("Add", erf, self.const(np.float32(1.0)))
        half_x = self.op("Mul", x, self.const(np.float32(0.5)))
        return self.op("Mul", half_x, one_plus)


def _attention(g: _GraphBuilder, x: str, mask_bias: str, prefix: str, shape: BertShape) -> str:
    split = g.const(np.array([0, 0, shape.heads, shape.head_dim], dtype=np.int64))

    def heads(name: str, perm: list[int]) -> str:
        projected = g.linear(x, f"{prefix}.self.{name}")
        return g.op("Transpose", g.op("Reshape", projected, split), perm=perm)

    q = heads("query", [0, 2, 1, 3])
    k = heads("key", [0, 2, 3, 1])
    v = heads("value", [0, 2, 1, 3])
    scores = g.op("Div", g.op("MatMul", q, k), g.const(np.float32(math.sqrt(shape.head_dim))))
    probs = g.op("Softmax", g.op("Add", scores, mask_bias), axis=-1)
    context = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    merged = g.op("Reshape", context, g.const(np.array([0, 0, shape.hidden], dtype=np.int64)))
    out = g.linear(merged, f"{prefix}.output.dense")
    return g.layer_norm(g.op("Add", out, x), f"{prefix}.output.LayerNorm", shape.eps)


def build_bert_encoder(weights: dict[str, npt.NDArray[np.float32]], shape: BertShape) -> onnx.ModelProto:
    """Graph inputs: input_ids, attention_mask, position_ids (int64 [B, S]).

    Output: last_hidden_state float32 [B, S, hidden]. Pooling stays in numpy
    so the caller controls it.
    """
    g = _GraphBuilder(weights)
    words = g.op("Gather", g.weight("embeddings.word_embeddings.weight"), "input_ids")
    positions = g.op("Gather", g.weight("embeddings.position_embeddings.weight"), "position_ids")
    token_type = g.const(weights["embeddings.token_type_embeddings.weight"][0], "token_type0")
    x = g.op("Add", g.op("Add", words, positions), token_type)
    x = g.layer_norm(x, "embeddings.LayerNorm", shape.eps)

    # Padding positions get a large negative bias before softmax.
    mask = g.op(
        "Cast", g.op("Unsqueeze", "attention_mask", g.const(np.array([1, 2], dtype=np.int64))), to=TensorProto.FLOAT
    )
    inverted = g.op("Sub", g.const(np.float32(1.0)), mask)
    mask_bias = g.op("Mul", inverted, g.const(np.float32(-10000.0)))

    for i in range(shape.layers):
        prefix = f"encoder.layer.{i}"
        x = _attention(g, x, mask_bias, f"{prefix}.attention", shape)
        hidden = g.gelu(g.linear(x, f"{prefix}.intermediate.dense"))
        out = g.linear(hidden, f"{prefix}.output.dense")
        x = g.layer_norm(g.op("Add", out, x), f"{prefix}.output.LayerNorm", shape.eps)
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))

    int_input = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])
        for name in ("input_ids", "attention_mask", "position_ids")
    ]
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", shape.hidden])
    graph = helper.make_graph(g.nodes, "bert_encoder", int_input, [output], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = 8
    return model


def load_bert_encoder(model_dir: Path) -> onnx.ModelProto:
    """Read config.json and model.safetensors from a sentence-transformers folder."""
    import json

    from safetensors.numpy import load_file

    config = json.loads((model_dir / "config.json").read_text())
    shape = BertShape(
        hidden=int(config["hidden_size"]),
        heads=int(config["num_attention_heads"]),
        layers=int(config["num_hidden_layers"]),
        eps=float(config.get("layer_norm_eps", 1e-12)),
    )
    weights = {
        k: v.astype(np.float32)
        for k, v in load_file(str(model_dir / "model.safetensors")).items()
        if v.dtype != np.int64
    }
    return build_bert_encoder(weights, shape)
