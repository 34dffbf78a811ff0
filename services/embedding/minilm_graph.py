"""Build an ONNX graph of a BERT sentence encoder from its safetensors weights.

The MiniLM weights ship as a pip package in safetensors form only; exporting
them through torch would pull gigabytes of packages into every install. BERT's
forward pass is a few dozen ONNX ops, so we write the graph directly, using
ONNX Runtime's fused kernels (attention, skip layer norm, bias GELU) that its
own optimizer would otherwise have to discover.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

_OPSET = 17
# ONNX Runtime's fused CPU kernels for transformer blocks.
_CONTRIB = "com.microsoft"
_CONTRIB_OPS = frozenset({"Attention", "SkipLayerNormalization", "BiasGelu"})


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
        domain = _CONTRIB if op_type in _CONTRIB_OPS else ""
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], domain=domain, **attrs))
        return out

    def matmul(self, x: str, key: str) -> str:
        return self.op("MatMul", x, self.weight(f"{key}.weight", transpose=True))

    def residual_norm(self, x: str, residual: str, dense: str, norm: str, eps: float) -> str:
        """LayerNorm(x + bias + residual) as one fused kernel."""
        return self.op(
            "SkipLayerNormalization",
            x,
            residual,
            self.weight(f"{norm}.weight"),
            self.weight(f"{norm}.bias"),
            self.weight(f"{dense}.bias"),
            epsilon=eps,
        )


def _attention(g: _GraphBuilder, x: str, mask: str, prefix: str, shape: BertShape) -> str:
    # One [hidden, 3*hidden] projection feeds ORT's fused multi-head attention.
    parts = [f"{prefix}.self.{name}" for name in ("query", "key", "value")]
    qkv_weight = np.concatenate([g.weights[f"{p}.weight"].T for p in parts], axis=1)
    qkv_bias = np.concatenate([g.weights[f"{p}.bias"] for p in parts])
    context = g.op(
        "Attention", x, g.const(qkv_weight, "qkv_w"), g.const(qkv_bias, "qkv_b"), mask, num_heads=shape.heads
    )
    dense = f"{prefix}.output.dense"
    return g.residual_norm(g.matmul(context, dense), x, dense, f"{prefix}.output.LayerNorm", shape.eps)


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
    x = g.op(
        "LayerNormalization",
        x,
        g.weight("embeddings.LayerNorm.weight"),
        g.weight("embeddings.LayerNorm.bias"),
        axis=-1,
        epsilon=shape.eps,
    )
    mask = g.op("Cast", "attention_mask", to=TensorProto.INT32)

    for i in range(shape.layers):
        prefix = f"encoder.layer.{i}"
        x = _attention(g, x, mask, f"{prefix}.attention", shape)
        up = f"{prefix}.intermediate.dense"
        hidden = g.op("BiasGelu", g.matmul(x, up), g.weight(f"{up}.bias"))
        down = f"{prefix}.output.dense"
        x = g.residual_norm(g.matmul(hidden, down), x, down, f"{prefix}.output.LayerNorm", shape.eps)
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))

    int_input = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])
        for name in ("input_ids", "attention_mask", "position_ids")
    ]
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", shape.hidden])
    graph = helper.make_graph(g.nodes, "bert_encoder", int_input, [output], g.inits)
    opsets = [helper.make_opsetid("", _OPSET), helper.make_opsetid(_CONTRIB, 1)]
    model = helper.make_model(graph, opset_imports=opsets)
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


def quantize_int8(graph: onnx.ModelProto) -> onnx.ModelProto:
    """The encoder with int8 weights (per output channel), activations quantized as they come.

    About twice as fast on CPU for vectors within cosine 0.98 of float32.
    `reduce_range` keeps weights to 7 bits: CPUs without VNNI (AVX2 only)
    multiply u8 by s8 into saturating int16, and full-range weights would
    make their vectors differ from those of an AVX-512 VNNI machine.
    """
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "float32.onnx", Path(tmp) / "int8.onnx"
        tagged = onnx.ModelProto()
        tagged.CopyFrom(graph)
        # The graph is built fused already: ORT's pre-processing pass (which it warns about without this tag)
        # has nothing to add.
        helper.set_model_props(tagged, {"onnx.quant.pre_process": "onnxruntime.quant"})
        onnx.save(tagged, source)
        quantize_dynamic(
            source,
            target,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            # Our fused contrib ops hide the MatMul outputs' types from shape inference.
            extra_options={"DefaultTensorType": TensorProto.FLOAT},
        )
        return onnx.load(target)
