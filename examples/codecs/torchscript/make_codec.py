#!/usr/bin/env python3
"""A slowpipe codec in Python: per-row int8 quantization with an outlier-safe scale, scripted with
TorchScript and saved as a .pt file that slowpipe loads with libtorch (no rebuild):

    python3 examples/codecs/torchscript/make_codec.py rowint8.pt
    build/slowpipe codec check torchscript:path=rowint8.pt,bits=6
    build/slowpipe run experiments/smoke.json --out out/ts --set compression.forward=torchscript:path=rowint8.pt

Needs Debian's python3-torch (the same 1.13 as libtorch-dev). The contract the module follows is
compression/torchscript.h: encode / decode (+ optional configure and state_digest); the state
lives in module attributes, and sender and receiver each hold their own copy.

Payload: u32 rows | per row its scale as two u32 (frexp mantissa * 2^24, exponent + 1024: exact) |
one byte per value (code + 128). All u32 little-endian. (TorchScript 1.13 cannot reinterpret a
float tensor's bytes, so floats travel as exact integer pairs.)
"""
import sys
from typing import Dict, List

import torch


class RowInt8(torch.nn.Module):
    bits: int
    messages: int  # state: messages seen by this end (equal on both ends after each message)

    def __init__(self):
        super().__init__()
        self.bits = 8
        self.messages = 0

    @torch.jit.export
    def configure(self, params: Dict[str, str]) -> None:
        for key, value in params.items():
            if key == "bits":
                bits = int(value)
                if bits < 2 or bits > 8:
                    raise ValueError("rowint8: bits=" + value + " is out of range; expected 2..8")
                self.bits = bits
            else:
                raise ValueError("rowint8: unknown parameter '" + key + "'; expected bits")

    def _rows(self, shape: List[int]) -> int:
        if len(shape) == 0:
            return 1
        return shape[0]

    def _u32_bytes(self, v: torch.Tensor) -> torch.Tensor:
        """int64 values in [0, 2^32) -> 4 little-endian bytes each."""
        parts = [torch.bitwise_and(torch.bitwise_right_shift(v, 8 * k), 255) for k in range(4)]
        return torch.stack(parts, dim=1).reshape(-1).to(torch.uint8)

    def _u32_values(self, b: torch.Tensor) -> torch.Tensor:
        w = b.to(torch.int64).reshape(-1, 4)
        return w[:, 0] + w[:, 1] * 256 + w[:, 2] * 65536 + w[:, 3] * 16777216

    @torch.jit.export
    def encode(self, x: torch.Tensor, example_ids: torch.Tensor, epoch: int, step: int) -> torch.Tensor:
        rows = self._rows(x.shape)
        flat = x.reshape(rows, -1) if rows > 0 else x.reshape(0, 0)
        top = float(2 ** (self.bits - 1) - 1)
        if flat.numel() > 0:
            scale = flat.abs().amax(dim=1)
        else:
            scale = torch.zeros(rows, dtype=torch.float32)
        inv = torch.where(scale > 0, top / scale, torch.zeros_like(scale))
        codes = torch.round(flat * inv.unsqueeze(1)).clamp(-top, top).to(torch.int64) + 128
        mantissa, exponent = torch.frexp(scale)
        words = torch.stack([(mantissa * 16777216.0).to(torch.int64), exponent.to(torch.int64) + 1024], dim=1)
        header = self._u32_bytes(torch.tensor([rows], dtype=torch.int64))
        self.messages += 1
        return torch.cat([header, self._u32_bytes(words.reshape(-1)), codes.reshape(-1).to(torch.uint8)])

    @torch.jit.export
    def decode(self, payload: torch.Tensor, shape: List[int], example_ids: torch.Tensor, epoch: int,
               step: int) -> torch.Tensor:
        n = 1
        for d in shape:
            n *= d
        rows = self._rows(shape)
        expect = 4 + 8 * rows + n
        if payload.numel() != expect:
            raise ValueError("rowint8: payload is " + str(payload.numel()) + " bytes, expected " + str(expect))
        sent = int(self._u32_values(payload[0:4])[0])
        if sent != rows:
            raise ValueError("rowint8: payload has " + str(sent) + " rows, the shape has " + str(rows))
        words = self._u32_values(payload[4:4 + 8 * rows]).reshape(rows, 2)
        if bool((words[:, 0] >= 16777216).any()) or bool((words[:, 1] < 1024 - 160).any()) or \
                bool((words[:, 1] > 1024 + 128).any()):
            raise ValueError("rowint8: a row scale is malformed")
        scale = torch.ldexp(words[:, 0].to(torch.float32) / 16777216.0, words[:, 1] - 1024)
        top = 2 ** (self.bits - 1) - 1
        codes = payload[4 + 8 * rows:].to(torch.int64) - 128
        if bool((codes.abs() > top).any()):
            raise ValueError("rowint8: a code is outside +-" + str(top))
        per_row = n // rows if rows > 0 else 0
        y = codes.to(torch.float32).reshape(rows, per_row) * (scale / float(top)).unsqueeze(1)
        self.messages += 1
        return y.reshape(shape)

    @torch.jit.export
    def state_digest(self) -> int:
        return self.messages


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: make_codec.py OUT.pt", file=sys.stderr)
        return 2
    torch.jit.script(RowInt8()).save(sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
