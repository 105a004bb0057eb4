"""What the processor can do, read from its feature flags (``/proc/cpuinfo``), never from how busy it is.

Decisions that depend on the hardware (bf16 compute where the processor multiplies bf16 natively, see
``verl.workers.engine.precision``; the benchmarks' machine line) read :func:`cpu_info` once. The flags
are the kernel's names: on x86 ``avx512_bf16`` (AVX512-BF16: ``VDPBF16PS`` dot products, Intel Cooper
Lake / Sapphire Rapids, AMD Zen 4 and later) and ``amx_bf16`` (AMX tiles, Intel Sapphire Rapids and
later); on Arm the ``bf16`` feature (``BFMMLA``/``BFDOT``, Armv8.6). A processor without them can
still run bf16 (oneDNN converts to fp32), but at no more than the fp32 rate, so bf16 buys nothing there.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path

#: feature flags that mean bf16 matrix products run natively (faster than fp32)
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")
#: flags the benchmark tables name (vector width and the bf16 units)
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "asimd", "sve", "bf16")


@dataclass(frozen=True)
class CpuInfo:
    """The processor's model name, architecture and feature flags."""

    model_name: str
    arch: str
    flags: frozenset[str]

    @property
    def native_bf16(self) -> bool:
        """bf16 matrix products run natively (AMX, AVX512-BF16 or Arm BF16)."""
        return any(f in self.flags for f in NATIVE_BF16_FLAGS)

    def describe(self) -> str:
        """One line for a results table: model, architecture and the flags that matter here."""
        shown = [f for f in REPORTED_FLAGS if f in self.flags]
        missing = [f for f in ("avx512_bf16", "amx_bf16") if f not in self.flags and self.arch == "x86_64"]
        text = f"{self.model_name} ({self.arch}; {' '.join(shown) or 'no vector flags listed'}"
        if missing:
            text += "; no " + ", no ".join(missing)
        return text + ")"


def parse_cpuinfo(text: str, arch: str) -> CpuInfo:
    """A :class:`CpuInfo` from the text of ``/proc/cpuinfo`` (the first processor's block)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough: all cores of one machine agree
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    # x86 names them "model name" / "flags"; Arm "Features" and (some kernels) "model name"
    name = fields.get("model name") or fields.get("hardware") or fields.get("cpu part") or "unknown processor"
    flags = fields.get("flags") or fields.get("features") or ""
    return CpuInfo(model_name=name, arch=arch, flags=frozenset(flags.split()))


@functools.cache
def cpu_info(path: str = "/proc/cpuinfo") -> CpuInfo:
    """This machine's :class:`CpuInfo`; without ``/proc/cpuinfo`` (not Linux) no flags are known, so no
    capability is assumed."""
    arch = platform.machine()
    file = Path(path)
    if not file.exists():
        return CpuInfo(model_name=platform.processor() or "unknown processor", arch=arch, flags=frozenset())
    return parse_cpuinfo(file.read_text(), arch)


__all__ = ["NATIVE_BF16_FLAGS", "REPORTED_FLAGS", "CpuInfo", "cpu_info", "parse_cpuinfo"]
