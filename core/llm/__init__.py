"""Small language models: decoders with a KV cache, how fast they serve, how well they predict.

- `decoder`: recognize the KV-cache interface (Optimum / ONNX Runtime GenAI layouts);
- `card`: layers, heads, KV heads, vocabulary, context, KV bytes per token, parameter split;
- `decode`: prefill and greedy decoding with the cache carried between steps, on any backend;
- `timing`: time to first token, tokens per second, ms per token p50 / p99; `serving`: the
  decoder benchmark `optistudio bench` runs (those figures with the size and environment);
- `batched_decode`: sequences of different lengths in one left-padded batch, rows joining and
  leaving between steps; `batched_serving`: the serving loop (static or continuous batching of
  decode steps) and its figures; `serving_whatif`: the profile of step and prefill times and
  the prediction at an arrival rate (`optistudio llm serve-whatif`);
- `genai_config`: the genai_config.json ONNX Runtime GenAI reads (the bundle's `genai/`);
- `perplexity`: perplexity, next-token top-1 agreement and mean KL against a reference;
- `weight_only`: MatMulNBits INT4 / INT8 for ONNX Runtime; `openvino_weights`: NNCF's;
- `choice`: Auto's rule for decoders (fastest at batch 1 within a perplexity budget);
- `folder`: a decoder given as its exporter's folder (which .onnx, the files beside it);
  `tokenize`: a text as the decoder's token ids (its tokenizer.json, or ids from .npy).

Heavy libraries (onnxruntime's quantizer, openvino, nncf) are imported only when used.
"""

from __future__ import annotations

from optistudio.core.llm.card import DecoderCard, read_card
from optistudio.core.llm.decode import DecoderSession, Generation, greedy, open_decoder
from optistudio.core.llm.decoder import DecoderIO, is_decoder, load_decoder_io, read_decoder_io

__all__ = [
    "DecoderCard",
    "DecoderIO",
    "DecoderSession",
    "Generation",
    "greedy",
    "is_decoder",
    "load_decoder_io",
    "open_decoder",
    "read_card",
    "read_decoder_io",
]
