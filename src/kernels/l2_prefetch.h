// l2_prefetch.h — fetch a weight's rows (or a slice of each row) into the L2 ahead of the kernel that reads them
// (torch-free). The fast engine runs it on a side branch of its graphs while a latency-bound kernel (the
// attention) leaves the DRAM idle, so that the next projection finds part of its weight in the L2 instead of
// waiting for DRAM (model/qwen3_fast.h, SPECPRESS_L2_PREFETCH). It writes nothing: its only effect is on timing.
//
// Launched without PDL and without being recorded as one of src/kernels' kernels (launch.h, graph_edges.h): it
// starts only once everything before it on its stream has completed, and no launch-completion edge makes it start
// early, beside the product it would slow down. The edge out of it where the engine joins its stream back (into the
// kernel after the layers; in the verify graph the final RMSNorm, one of ours) may be rewritten into a
// launch-completion edge: that kernel then waits in pdl_wait for the prefetch to complete too. Harmless, as the
// prefetch writes nothing; it may add one to a graph's count of such edges.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace specpress::kernels {

// cp.async.bulk.prefetch.L2 of bytes [offset, offset + bytes) of each of `rows` rows starting at `base`, `stride`
// bytes apart. base + offset, stride and bytes must be multiples of 16 (cudaErrorInvalidValue otherwise); rows or
// bytes 0: nothing.
cudaError_t l2_prefetch_rows(const void* base, int64_t rows, int64_t stride, int64_t offset, int64_t bytes,
                             cudaStream_t stream);

}  // namespace specpress::kernels
