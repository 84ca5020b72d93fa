"""What attnlab reads of the CPU it runs on.

Two choices depend on it: which library multiplies fp32 layers when decoding (MKL runs its
AVX-512 kernels on Intel's CPUs only, `attnlab.model.linear`), and which build of attnlab's C++
kernels a process may load (they are compiled for the instructions of the CPU that built them,
`attnlab.model.kernels`).
"""

from __future__ import annotations

import platform
from functools import cache
from pathlib import Path


@cache
def cpu_fields() -> dict[str, str]:
    """The first processor's entry of /proc/cpuinfo ({"vendor_id": "GenuineIntel", "model
    name": ..., "flags": ...}); on systems without it, what `platform` tells."""
    fields: dict[str, str] = {}
    try:
        with Path("/proc/cpuinfo").open() as info:
            for line in info:
                if not line.strip():
                    break  # the end of the first processor's entry
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    if "vendor_id" not in fields:  # (Windows names the vendor in platform.processor())
        processor = platform.processor()
        fields = {"vendor_id": "GenuineIntel" if "GenuineIntel" in processor else "", "model name": processor}
    return fields


def cpu_vendor() -> str:
    """The CPU's vendor string ("GenuineIntel", "AuthenticAMD", ...; "" where none is found)."""
    return cpu_fields().get("vendor_id", "")


def cpu_signature() -> str:
    """What a `-march=native` build depends on: the machine, the CPU's vendor and model, and the
    instruction sets it reports."""
    fields = cpu_fields()
    return "|".join([platform.machine(), *(fields.get(key, "") for key in ("vendor_id", "model name", "flags"))])
