"""peertrain.protocol: everything that crosses the wire, strict with untrusted bytes.

The bottom layer: it imports nothing else of ours (torch only lazily, inside the codec
functions, so the message layer stays light). One concept per module:

    errors.py           the error tree: PeertrainError -> ProtocolError -> DecodeError, ...
    packing.py          msgpack in/out; every unpacking failure becomes DecodeError
    ids.py              versioned protocol IDs /peertrain/<name>/<major>.<minor>.<patch>
    schema.py           strict field converters built from type annotations
    messages.py         @message dataclasses, encode/decode, Request/Response, Ping/Pong/Error
    framing.py          length-prefixed frames with hard limits and idle timeouts
    envelope.py         Ed25519-signed envelopes, target checks, replay guard
    codecs.py           tensor codecs: fp32, fp16, bf16, int8 / int8-f16 blockwise
    int8_blockwise.py   the tiled int8 quantization kernels
    error_feedback.py   per-tensor quantization residuals carried to the next update
    tensors.py          tensor headers, chunk digests (blake3), verified downloads
    tensor_transfer.py  header and chunk-range requests over a stream, resumable
    conformance.py      checks every message type and codec must pass (used by tests)
"""
