// What the process uses: resident memory now and at its peak (training runs record the peak in their
// summary; the benchmarks print both).
#pragma once

namespace attnlab {

// Resident set size now (VmRSS from /proc/self/status) and at its peak (getrusage), in MiB.
double current_rss_mb();
double peak_rss_mb();

}  // namespace attnlab
