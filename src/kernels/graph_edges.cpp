// graph_edges.cpp — see graph_edges.h.
#include "kernels/graph_edges.h"

#include <unordered_set>

namespace specpress::kernels {
namespace {

bool is_kernel(cudaGraphNode_t node) {
  cudaGraphNodeType type{};
  return cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel;
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
  // Whether a kernel node runs one of ours; a library's kernel (cuBLASLt loads its own) is unknown to the runtime.
  auto is_ours = [&](cudaGraphNode_t node, bool& ours) {
    cudaKernelNodeParams params{};
    const cudaError_t err = cudaGraphKernelNodeGetParams(node, &params);
    ours = false;
    if (err == cudaErrorInvalidDeviceFunction) {
      (void)cudaGetLastError();
      return cudaSuccess;
    }
    if (err == cudaSuccess) ours = own.count(params.func) != 0;
    return err;
  };
  for (size_t i = 0; i < n; ++i) {
    if (!is_default(data[i]) || !is_kernel(from[i]) || !is_kernel(to[i])) continue;
    bool to_ours = false, from_ours = false;
    e = is_ours(to[i], to_ours);
    if (e == cudaSuccess && to_ours) e = is_ours(from[i], from_ours);
    if (e != cudaSuccess) return e;
    if (!to_ours || from_ours) continue;
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
