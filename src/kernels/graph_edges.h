// graph_edges.h — launch-completion edges into src/kernels' kernels in a captured CUDA graph (torch-free). The
// fast engine applies it to its graphs when PDL is on (kernels/launch.h: SPECPRESS_LC_EDGES, default 1); in a
// same-binary A/B it shortened the 4B DFlash cycle by 3.0% and the 8B one by 1.4% (docs/PERF.md, eleventh pass).
//
// In the verify and draft graphs PDL is off by default (kernels/launch.h), so each of our small kernels (RMSNorm,
// SwiGLU, attention, argmax) is launched only once the cuBLASLt product before it has completed. The rewrite
// lets such a kernel launch as soon as every block of the kernel before it has begun: its blocks take free
// SM slots and wait in pdl_wait (a programmatic edge makes griddepcontrol.wait wait for that kernel's
// completion and memory flush), so its launch and block scheduling overlap the product instead of following
// it. This is safe for src/kernels' kernels only: each waits before reading an earlier kernel's results and
// before writing (launch.h's contract). Only edges from a kernel that is not ours, and into which only
// ordinary edges lead, are rewritten: everything before that kernel has completed when it starts, so only that
// kernel and ours overlap at such an edge. That keeps the fused attention's early reads (the length and the older
// cache rows, which the product just before it does not write) correct. A chain of such edges (tried first) let the draft
// graph's attention read cache rows that the context injection a few kernels earlier was still writing, in the
// skinny matmul mode, where every kernel is ours. No kernel is starved: the next one launches only once every
// block of the previous one is running. With folded norms a consumer (the attention, the SwiGLU) has a second
// input, the row factors' kernel on the side stream; that edge is ours into ours and stays ordinary.
#pragma once
#include <cuda_runtime.h>

#include <vector>

namespace specpress::kernels {

// Rewrites every ordinary edge of `graph` from a kernel node not running one of `ours` (host function
// pointers, as launch_recorder() records them), whose own incoming edges are all ordinary, to a kernel node
// running one of them into a programmatic edge from the upstream node's launch-completion port. `rewritten`
// counts them. The graph must not be instantiated yet.
cudaError_t relax_edges_into(cudaGraph_t graph, const std::vector<const void*>& ours, int& rewritten);

}  // namespace specpress::kernels
