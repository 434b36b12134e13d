// decode_step.h — the small device-side pieces of a decoding step (torch-free), so the loop needs no
// host round trip between forwards: embedding gather, greedy argmax, the DFlash acceptance rule and
// the device position counters.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specpress::kernels {

// out[t, :] = table[ids[t], :] for t < rows (H % 8 == 0). Reference twin: at::embedding.
cudaError_t embedding_gather(const __nv_bfloat16* table, const int64_t* ids, __nv_bfloat16* out, int rows, int H,
                             cudaStream_t stream);

// out[r] = argmax_v logits[r * ld + v] over v < V, ties to the lowest index, as at::argmax and the reference
// sampler take it, except that NaN is never a maximum here (they take NaN as the largest value): the maximum
// of the other values (-inf included), and 0 for a row of NaN only. Reference twin: argmax(-1) of the logits in
// float64 with NaN as -inf and -inf as the lowest finite value. split: a cluster of 8 blocks a row, each scanning
// a slice (the default, SPECPRESS_ARGMAX_SPLIT; more than 65535 rows take the other kernel); otherwise one block
// a row. Both give the same index.
cudaError_t argmax_rows(const __nv_bfloat16* logits, int64_t ld, int rows, int V, int64_t* out, bool split,
                        cudaStream_t stream);

// DFlash acceptance (dflash-spec.md §3.5), one thread. With block = block_ids[0..B) (bonus + drafts) and
// posterior[0..B) the target's tokens: a = longest prefix with block[i+1] == posterior[i];
// record = [block (B), posterior (B), a] for the host; *ctx_start = *start; *start += a + 1;
// block_ids = [posterior[a], mask_id x (B-1)] ready for the next draft. host_record (optional): a device
// pointer to mapped pinned host memory that gets the record as well, so that the host can read it after an
// event behind this launch without a copy on the stream.
cudaError_t dflash_accept(int64_t* block_ids, const int64_t* posterior, int B, int64_t mask_id, int* start,
                          int* ctx_start, int64_t* record, cudaStream_t stream, int64_t* host_record = nullptr);

// *counter += inc (the decode step's position advance inside its graph).
cudaError_t advance_counter(int* counter, int inc, cudaStream_t stream);

}  // namespace specpress::kernels
