"""Keep glibc's allocator from holding on to the memory of large requests.

glibc serves an allocation of 128 KiB or more with its own mmap, returned to
the system on free, until the first such block is freed: from then on it
raises that threshold to the freed block's size (up to 32 MiB), so later
large blocks come from the heap, and the heap, fragmented by small objects
allocated in between, is not given back. A webhook that reads a few 1 MiB
bodies (an AdmissionReview may carry 1.5 MiB) thus keeps their high-water
mark as RSS for good: the 100,000-review fuzz run grew from 69 to 126 MiB
with a flat Python heap (BENCHMARKS.md, "Webhook under hostile input").

Setting the two thresholds explicitly turns that adjustment off (mallopt(3)):
large blocks are always mmapped and unmapped, and the heap top is trimmed
past 128 KiB. Same run, thresholds pinned: 78 MiB after 2,000 reviews, 77
MiB after 100,000. The cost is an mmap/munmap pair per large block, which
only large bodies pay.

The environment variables MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_,
when set, win: the process leaves the allocator alone. On a C library
without mallopt (musl has it as a no-op, macOS lacks it) nothing happens.
"""

from __future__ import annotations

import ctypes
import os

# <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
THRESHOLD = 128 * 1024
_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def pin_malloc_thresholds(threshold: int = THRESHOLD) -> bool:
    """Pin glibc's mmap and trim thresholds; True when the C library took them."""
    if any(name in os.environ for name in _ENV):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    took = int(mallopt(_M_MMAP_THRESHOLD, threshold)) == 1
    took = int(mallopt(_M_TRIM_THRESHOLD, threshold)) == 1 and took
    return took
