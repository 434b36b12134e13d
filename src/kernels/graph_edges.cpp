// graph_edges.cpp — see graph_edges.h.
#include "kernels/graph_edges.h"

#include <unordered_set>

namespace specpress::kernels {
namespace {

bool is_kernel(cudaGraphNode_t node) {
  cudaGraphNodeType type{};
  if (cudaGraphNodeGetType(node, &type) != cudaSuccess) {
    (void)cudaGetLastError();  // not a node we rewrite; leave no error behind for a later launch check
    return false;
  }
  return type == cudaGraphNodeTypeKernel;
}

bool is_default(const cudaGraphEdgeData& e) { return e.from_port == 0 && e.to_port == 0 && e.type == 0; }

}  // namespace

cudaError_t relax_edges_into(cudaGraph_t graph, const std::vector<const void*>& ours, int& rewritten) {
  rewritten = 0;
  size_t n = 0;
  cudaError_t e = cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n);
  if (e != cudaSuccess || n == 0) return e;
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  e = cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n);
  if (e != cudaSuccess) return e;
  const std::unordered_set<const void*> own(ours.begin(), ours.end());
  // Whether a kernel node runs one of ours. The runtime knows every one of ours; a library's kernel (cuBLASLt
  // loads its own) makes the query fail, and so does anything else we cannot identify: not ours either way.
  auto is_ours = [&](cudaGraphNode_t node) {
    cudaKernelNodeParams params{};
    if (cudaGraphKernelNodeGetParams(node, &params) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return own.count(params.func) != 0;
  };
  // The argument for safety (graph_edges.h) needs every edge into the upstream kernel to be ordinary: nodes
  // with an incoming programmatic edge are never the upstream end of a rewritten one.
  std::unordered_set<cudaGraphNode_t> early;
  for (size_t i = 0; i < n; ++i)
    if (!is_default(data[i])) early.insert(to[i]);
  for (size_t i = 0; i < n; ++i) {
    if (!is_default(data[i]) || early.count(from[i]) != 0 || !is_kernel(from[i]) || !is_kernel(to[i])) continue;
    if (!is_ours(to[i]) || is_ours(from[i])) continue;
    cudaGraphEdgeData relaxed{};
    relaxed.from_port = cudaGraphKernelNodePortLaunchCompletion;
    relaxed.type = cudaGraphDependencyTypeProgrammatic;
    e = cudaGraphRemoveDependencies(graph, &from[i], &to[i], &data[i], 1);
    if (e == cudaSuccess) e = cudaGraphAddDependencies(graph, &from[i], &to[i], &relaxed, 1);
    if (e != cudaSuccess) return e;
    ++rewritten;
  }
  return cudaSuccess;
}

}  // namespace specpress::kernels
