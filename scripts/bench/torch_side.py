"""What the two PyTorch programs share: Debian's PyTorch, imported with an error that names the package
when it is missing, and the memory figures they print beside attnlab's (read the same way as
experiments/runner/process_stats.cpp reads them).

Run as a program it only imports PyTorch: compare.py does that first, so a missing package is reported
before any benchmark runs.
"""
import resource
import sys

try:
    import torch
except ImportError as error:
    sys.exit(f"PyTorch is missing ({error}): apt-get install python3-torch (Debian's package, for /usr/bin/python3)")


def current_rss_mb():
    """The resident set now (VmRSS), in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb():
    """The largest resident set this process has had (ru_maxrss, KiB on Linux), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
