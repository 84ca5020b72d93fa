"""`keep_freed_memory`: a freed large buffer is handed back for the next step, not unmapped, so
the next one of the same size page-faults no more (checked in a fresh process: the setting is
process-wide)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# After what a command imports before it calls `keep_freed_memory` (`attnlab.decode.commands`): in a
# process that had imported only torch, glibc still gave each 40 MB buffer back (10,240 faults),
# whatever the mallopt settings; the heap's layout then is not a command's.
PROBE = """
import resource, sys, torch
import attnlab.decode.commands
from attnlab.model.memory import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
faults = []
for _ in range(9):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffer = torch.empty(10 * 1024 * 1024).fill_(1.0)  # 40 MB, as a step's fp32 logits
    del buffer
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
steady = sorted(faults[3:])  # the first two or three may still fault
print(kept, steady[len(steady) // 2])  # the median: the kernel may reclaim the heap once on a busy machine
"""


def _probe(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout
    kept, faults = out.split()
    return kept, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_ends_the_page_faults_of_each_large_buffer() -> None:
    kept, faults = _probe("keep")
    _, default_faults = _probe("default")
    assert kept == "True"
    assert default_faults > 5000  # 40 MB of 4 KB pages, unmapped and faulted again every time
    assert faults < 100  # (a full CI run on a busy machine once saw one of the six refault)
