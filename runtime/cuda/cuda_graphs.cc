// The cuda Platform, part 2: executable graphs (instantiate, upload, launch,
// exec update, kernel-node parameter patches) and graph inspection (kernel
// nodes, node count, Graphviz DOT).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "runtime/cuda/cuda_error.h"
#include "runtime/cuda/cuda_platform_impl.h"
#include "runtime/launch_clock.h"
#include "runtime/logging.h"

namespace grove::runtime::cuda_detail {
namespace {

// "N nodes (kernel K, memset M, ...), E edges (P programmatic)": what a graph
// holds, for errors that CUDA gives without saying which node it refused.
std::string describe_graph_contents(cudaGraph_t graph) {
  size_t count = 0;
  if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) return "(nodes unreadable)";
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0 && cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) {
    return "(nodes unreadable)";
  }
  std::map<int, size_t> by_type;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    if (cudaGraphNodeGetType(node, &type) == cudaSuccess) ++by_type[static_cast<int>(type)];
  }
  static const char* const kTypeNames[] = {
      "kernel",       "memcpy",       "memset",           "host",           "graph",     "empty",
      "wait event",   "event record", "semaphore signal", "semaphore wait", "mem alloc", "mem free",
      "batch mem op", "conditional"};
  std::string text = str_cat(count, " nodes (");
  bool first = true;
  for (const auto& [type, n] : by_type) {
    const char* name = type >= 0 && type < 14 ? kTypeNames[type] : "other";
    text += str_cat(first ? "" : ", ", name, " ", n);
    first = false;
  }
  size_t edges = 0;
  if (cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges) == cudaSuccess) {
    std::vector<cudaGraphNode_t> from(edges), to(edges);
    std::vector<cudaGraphEdgeData> data(edges);
    size_t programmatic = 0;
    if (edges > 0 &&
        cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &edges) == cudaSuccess) {
      for (const cudaGraphEdgeData& edge : data) {
        if (edge.type != cudaGraphDependencyTypeDefault) ++programmatic;
      }
    }
    text += str_cat("), ", edges, " edges (", programmatic, " not default)");
  } else {
    text += ")";
  }
  return text;
}

// Replaces every edge of `graph` whose type is not default (programmatic
// dependent launch) by a default edge between the same nodes; returns how
// many were replaced (Note [WHILE bodies without programmatic edges]).
size_t make_edges_default(cudaGraph_t graph) {
  size_t edges = 0;
  if (cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges) != cudaSuccess || edges == 0) {
    cudaGetLastError();
    return 0;
  }
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  std::vector<cudaGraphEdgeData> data(edges);
  if (cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &edges) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  size_t replaced = 0;
  for (size_t i = 0; i < edges; ++i) {
    if (data[i].type == cudaGraphDependencyTypeDefault) continue;
    if (cudaGraphRemoveDependencies(graph, &from[i], &to[i], &data[i], 1) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    if (cudaGraphAddDependencies(graph, &from[i], &to[i], nullptr, 1) != cudaSuccess) {
      cudaGetLastError();  // put the edge back as it was: never drop an ordering
      cudaGraphAddDependencies(graph, &from[i], &to[i], &data[i], 1);
      cudaGetLastError();
      continue;
    }
    ++replaced;
  }
  return replaced;
}

CudaGraph& graph_of(GraphHandle graph) {
  GROVE_CHECK(graph.impl != nullptr, "cuda: use of a null graph handle");
  return *static_cast<CudaGraph*>(graph.impl);
}

CudaGraphExec& exec_of(GraphExecHandle exec) {
  GROVE_CHECK(exec.impl != nullptr, "cuda: use of a null executable graph handle");
  return *static_cast<CudaGraphExec*>(exec.impl);
}

// A kernel node's parameters for grove's own kernel; CUDA reads each argument
// through a pointer to its slot, so `pointers` must live until the call that
// takes the parameters.
cudaKernelNodeParams kernel_node_params(const CudaKernel& kernel, const LaunchDims& dims,
                                        const KernelArgs& args, std::vector<void*>& pointers) {
  pointers.resize(args.slots.size());
  for (size_t i = 0; i < args.slots.size(); ++i) {
    pointers[i] = const_cast<uint64_t*>(&args.slots[i]);
  }
  cudaKernelNodeParams params{};
  params.func = reinterpret_cast<void*>(kernel.get());
  params.gridDim = dim3(dims.grid.x, dims.grid.y, dims.grid.z);
  params.blockDim = dim3(dims.block.x, dims.block.y, dims.block.z);
  params.sharedMemBytes = dims.shared_bytes;
  params.kernelParams = pointers.data();
  params.extra = nullptr;
  return params;
}

const char* update_result_text(cudaGraphExecUpdateResult result) {
  switch (result) {
    case cudaGraphExecUpdateSuccess:
      return "success";
    case cudaGraphExecUpdateError:
      return "the update failed for an unexpected reason";
    case cudaGraphExecUpdateErrorTopologyChanged:
      return "the topology changed (node count or dependencies differ)";
    case cudaGraphExecUpdateErrorNodeTypeChanged:
      return "the type of a node changed";
    case cudaGraphExecUpdateErrorFunctionChanged:
      return "the function of a kernel node changed";
    case cudaGraphExecUpdateErrorParametersChanged:
      return "a node's parameters changed in a way an update cannot apply";
    case cudaGraphExecUpdateErrorNotSupported:
      return "a node does not support updates";
    case cudaGraphExecUpdateErrorUnsupportedFunctionChange:
      return "the function of a kernel node changed in an unsupported way";
    case cudaGraphExecUpdateErrorAttributesChanged:
      return "a node's attributes changed in a way an update cannot apply";
  }
  return "the update failed (unknown cudaGraphExecUpdateResult)";
}

}  // namespace

// Note [AutoFreeOnLaunch]: a graph that allocates memory itself (a memory
// allocation node, e.g. from cudaMallocAsync inside captured library code) owns
// that memory from launch until something frees it. grove's tree keeps graph
// outputs alive across replays, so such memory is often still live when the
// same graph is launched again, and CUDA refuses to relaunch a graph whose
// allocations are unfreed (cudaErrorInvalidValue) unless it was instantiated
// with cudaGraphInstantiateFlagAutoFreeOnLaunch, which frees them at the start
// of the next launch. That matches grove's replay contract: a replay overwrites
// the previous replay's outputs (docs/ARCHITECTURE.md). Memory from grove's own
// private pools is ordinary cudaMalloc memory outside the graph and is not
// affected. InstantiateOptions::auto_free_on_launch therefore defaults to true.
GraphExecHandle CudaPlatform::instantiate(GraphHandle graph, const InstantiateOptions& options) {
  CudaGraph& source = graph_of(graph);
  use_device();
  unsigned long long flags =
      options.auto_free_on_launch ? cudaGraphInstantiateFlagAutoFreeOnLaunch : 0;
  cudaGraphExec_t exec = nullptr;
  GROVE_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, source.graph, flags),
                   "instantiating a graph of ", graph_node_count(graph), " nodes on ", where());
  // Uploading now moves the one-time cost of building the device-side work
  // descriptors out of the first replay, which is then as fast as later ones.
  cudaStream_t upload = options.upload_stream.is_default()
                            ? upload_stream()
                            : static_cast<cudaStream_t>(options.upload_stream.impl);
  cudaError_t status = cudaGraphUpload(exec, upload);
  // Without a caller's stream to order the upload, finish it here, so that no
  // launch on any stream can race it.
  if (status == cudaSuccess && options.upload_stream.is_default()) {
    status = cudaStreamSynchronize(upload);
  }
  if (status != cudaSuccess) {
    cudaGraphExecDestroy(exec);
    throw_cuda_error(status, "cudaGraphUpload",
                     str_cat("uploading a newly instantiated graph to ", where()));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++source.references;
  return GraphExecHandle{new CudaGraphExec{exec, &source}};
}

cudaStream_t CudaPlatform::upload_stream() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (upload_stream_ == nullptr) {
    GROVE_CUDA_CHECK(cudaStreamCreateWithFlags(&upload_stream_, cudaStreamNonBlocking),
                     "creating the graph-upload stream of ", where());
  }
  return upload_stream_;
}

void CudaPlatform::launch_graph(GraphExecHandle exec, StreamHandle stream) {
  CudaGraphExec& e = exec_of(exec);
  if (stream.is_default())
    forbid_legacy_stream_during_capture("launching on the legacy default stream");
  use_device();
  if (launch_clock::running()) [[unlikely]] {  // Note [The launch clock]
    const auto start = std::chrono::steady_clock::now();
    GROVE_CUDA_CHECK(cudaGraphLaunch(e.exec, static_cast<cudaStream_t>(stream.impl)),
                     "launching (replaying) a graph on ", where());
    launch_clock::add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count());
    return;
  }
  GROVE_CUDA_CHECK(cudaGraphLaunch(e.exec, static_cast<cudaStream_t>(stream.impl)),
                   "launching (replaying) a graph on ", where());
}

ExecUpdateResult CudaPlatform::update_graph_exec(GraphExecHandle exec, GraphHandle graph) {
  CudaGraphExec& e = exec_of(exec);
  CudaGraph& g = graph_of(graph);
  use_device();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string change = kernel_change(*e.source, g);
    if (!change.empty()) return ExecUpdateResult{false, change};
  }
  cudaGraphExecUpdateResultInfo info{};
  cudaError_t status = cudaGraphExecUpdate(e.exec, g.graph, &info);
  if (status == cudaSuccess) return ExecUpdateResult{true, ""};
  if (status != cudaErrorGraphExecUpdateFailure) {
    throw_cuda_error(status, "cudaGraphExecUpdate",
                     str_cat("updating an executable graph in place on ", where()));
  }
  cudaGetLastError();
  std::string reason = str_cat("cudaGraphExecUpdate: ", update_result_text(info.result));
  if (info.errorNode != nullptr) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    if (cudaGraphNodeGetType(info.errorNode, &type) == cudaSuccess &&
        type == cudaGraphNodeTypeKernel) {
      reason += str_cat(" at kernel node '", kernel_node_name(g, info.errorNode), "'");
    }
    cudaGetLastError();
  }
  return ExecUpdateResult{false, reason};
}

// Note [Exec update keeps kernels]: CUDA can swap a kernel node's function in
// an update, but grove's contract (and sim's) is narrower: an update swaps
// arguments only, so that kernel-node indices, names and the exec's source
// graph keep describing the same kernels. A changed kernel is reported as the
// reason to re-instantiate. Counts that differ are left to CUDA's topology check.
std::string CudaPlatform::kernel_change(CudaGraph& from, CudaGraph& to) {
  const std::vector<cudaGraphNode_t>& old_nodes = kernel_nodes_of(from);
  const std::vector<cudaGraphNode_t>& new_nodes = kernel_nodes_of(to);
  if (old_nodes.size() != new_nodes.size()) return "";
  for (size_t i = 0; i < old_nodes.size(); ++i) {
    auto old_launch = from.launches.find(old_nodes[i]);
    auto new_launch = to.launches.find(new_nodes[i]);
    const CudaKernel* old_kernel =
        old_launch == from.launches.end() ? nullptr : old_launch->second.kernel;
    const CudaKernel* new_kernel =
        new_launch == to.launches.end() ? nullptr : new_launch->second.kernel;
    if (old_kernel != new_kernel) {
      return str_cat("kernel node ", i, " changed from '", kernel_node_name(from, old_nodes[i]),
                     "' to '", kernel_node_name(to, new_nodes[i]),
                     "'; an exec update only swaps arguments");
    }
  }
  return "";
}

const std::vector<cudaGraphNode_t>& CudaPlatform::kernel_nodes_of(CudaGraph& graph) {
  if (graph.kernel_nodes) return *graph.kernel_nodes;
  size_t count = 0;
  GROVE_CUDA_CHECK(cudaGraphGetNodes(graph.graph, nullptr, &count),
                   "counting the nodes of a "
                   "graph on ",
                   where());
  std::vector<cudaGraphNode_t> nodes(count);
  GROVE_CUDA_CHECK(cudaGraphGetNodes(graph.graph, nodes.data(), &count),
                   "listing the nodes of a "
                   "graph on ",
                   where());
  std::vector<cudaGraphNode_t> kernels;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    GROVE_CUDA_CHECK(cudaGraphNodeGetType(node, &type), "reading a graph node's type on ", where());
    if (type == cudaGraphNodeTypeKernel) kernels.push_back(node);
  }
  graph.kernel_nodes = std::move(kernels);
  return *graph.kernel_nodes;
}

std::string CudaPlatform::kernel_node_name(CudaGraph& graph, cudaGraphNode_t node) {
  if (auto it = graph.launches.find(node); it != graph.launches.end()) {
    return it->second.kernel->name;
  }
  // A library kernel: ask CUDA for its name, which not every launch path keeps.
  cudaKernelNodeParams params{};
  const char* name = nullptr;
  if (cudaGraphKernelNodeGetParams(node, &params) == cudaSuccess &&
      cudaFuncGetName(&name, params.func) == cudaSuccess && name != nullptr) {
    return name;
  }
  cudaGetLastError();
  return "<library kernel>";
}

std::vector<KernelNodeInfo> CudaPlatform::kernel_nodes(GraphHandle graph) {
  CudaGraph& g = graph_of(graph);
  use_device();
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<KernelNodeInfo> result;
  for (cudaGraphNode_t node : kernel_nodes_of(g)) {
    KernelNodeInfo info;
    info.kernel_node_index = result.size();
    info.kernel_name = kernel_node_name(g, node);
    if (auto it = g.launches.find(node); it != g.launches.end()) {
      info.launched_by_grove = true;
      info.args = it->second.args;
    }
    result.push_back(std::move(info));
  }
  return result;
}

void CudaPlatform::set_kernel_node_args(GraphExecHandle exec, GraphHandle graph,
                                        size_t kernel_node_index, const KernelArgs& args) {
  CudaGraphExec& e = exec_of(exec);
  CudaGraph& g = graph_of(graph);
  use_device();
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<cudaGraphNode_t>& nodes = kernel_nodes_of(g);
  GROVE_CHECK(kernel_node_index < nodes.size(), "set_kernel_node_args: the graph has ",
              nodes.size(), " kernel nodes; there is no kernel node ", kernel_node_index);
  cudaGraphNode_t node = nodes[kernel_node_index];
  auto record = g.launches.find(node);
  GROVE_CHECK(record != g.launches.end(), "set_kernel_node_args: kernel node ", kernel_node_index,
              " ('", kernel_node_name(g, node),
              "') was launched by a library, not by grove; only grove's own kernels can have "
              "their arguments patched");
  GROVE_CHECK(record->second.args.slots.size() == args.slots.size(),
              "set_kernel_node_args: kernel ", record->second.kernel->name, " takes ",
              record->second.args.slots.size(), " argument slots, got ", args.slots.size());
  // The exec is addressed through the node at the same index of the graph it
  // was instantiated from (Note [Graph lifetime]); an exec update keeps that
  // pairing because it requires identical topology.
  const std::vector<cudaGraphNode_t>& source_nodes = kernel_nodes_of(*e.source);
  GROVE_CHECK(kernel_node_index < source_nodes.size(),
              "set_kernel_node_args: the executable "
              "graph has ",
              source_nodes.size(), " kernel nodes; there is no kernel node ", kernel_node_index);
  // The node's launch configuration comes from grove's own record: CUDA cannot
  // read back a node whose function is a library kernel (cudaKernel_t).
  const LaunchRecord& launch = record->second;
  std::vector<void*> pointers;
  cudaKernelNodeParams params = kernel_node_params(*launch.kernel, launch.dims, args, pointers);
  GROVE_CUDA_CHECK(
      cudaGraphExecKernelNodeSetParams(e.exec, source_nodes[kernel_node_index], &params),
      "patching the arguments of kernel node ", kernel_node_index, " ('",
      record->second.kernel->name, "') in an executable graph on ", where());
}

// Note [Head kernel nodes]: the node is appended to grove's cached list of
// the graph's kernel nodes (the list kernel-node indices refer to), so the
// indices of the captured nodes stay what kernel_nodes() reported; the exec
// made from this graph later addresses its nodes through the same list.
size_t CudaPlatform::add_head_kernel_node(GraphHandle graph, KernelHandle kernel,
                                          const LaunchDims& dims, const KernelArgs& args) {
  CudaGraph& g = graph_of(graph);
  GROVE_CHECK_AS(DeviceError, kernel.impl != nullptr, where(), ": head node of a null kernel");
  const auto* cuda_kernel = static_cast<const CudaKernel*>(kernel.impl);
  use_device();
  std::lock_guard<std::mutex> lock(mutex_);
  kernel_nodes_of(g);  // the list the new node is appended to
  size_t root_count = 0;
  GROVE_CUDA_CHECK(cudaGraphGetRootNodes(g.graph, nullptr, &root_count),
                   "counting the root nodes of a graph on ", where());
  std::vector<cudaGraphNode_t> roots(root_count);
  if (root_count > 0) {
    GROVE_CUDA_CHECK(cudaGraphGetRootNodes(g.graph, roots.data(), &root_count),
                     "listing the root nodes of a graph on ", where());
  }
  std::vector<void*> pointers;
  cudaKernelNodeParams params = kernel_node_params(*cuda_kernel, dims, args, pointers);
  cudaGraphNode_t node = nullptr;
  GROVE_CUDA_CHECK(cudaGraphAddKernelNode(&node, g.graph, nullptr, 0, &params),
                   "adding kernel node '", cuda_kernel->name, "' (grid ", dims.grid.x, ", block ",
                   dims.block.x, ") at the head of a graph on ", where());
  if (root_count > 0) {
    std::vector<cudaGraphNode_t> from(root_count, node);
    GROVE_CUDA_CHECK(
        cudaGraphAddDependencies(g.graph, from.data(), roots.data(), nullptr, root_count),
        "ordering the graph's ", root_count, " root nodes after kernel node '", cuda_kernel->name,
        "' on ", where());
  }
  g.launches[node] = LaunchRecord{cuda_kernel, dims, args};
  g.kernel_nodes->push_back(node);
  return g.kernel_nodes->size() - 1;
}

GraphHandle CudaPlatform::create_graph() {
  use_device();
  cudaGraph_t graph = nullptr;
  GROVE_CUDA_CHECK(cudaGraphCreate(&graph, 0), "creating an empty graph on ", where());
  auto* g = new CudaGraph();
  g->graph = graph;
  return GraphHandle{g};
}

uint64_t CudaPlatform::create_while_condition(GraphHandle graph, bool initial) {
  use_device();
  cudaGraphConditionalHandle handle = 0;
  GROVE_CUDA_CHECK(cudaGraphConditionalHandleCreate(&handle, graph_of(graph).graph, initial ? 1 : 0,
                                                    cudaGraphCondAssignDefault),
                   "creating a WHILE condition on ", where(),
                   " (conditional nodes need CUDA 12.4 or newer in driver and runtime)");
  return static_cast<uint64_t>(handle);
}

void CudaPlatform::add_while_node(GraphHandle graph, uint64_t condition, GraphHandle body) {
  use_device();
  cudaGraph_t parent = graph_of(graph).graph;
  size_t count = 0;
  GROVE_CUDA_CHECK(cudaGraphGetNodes(parent, nullptr, &count), "listing the nodes of a graph on ",
                   where());
  std::vector<cudaGraphNode_t> before(count);
  if (count > 0) {
    GROVE_CUDA_CHECK(cudaGraphGetNodes(parent, before.data(), &count),
                     "listing the nodes of a graph on ", where());
  }
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = static_cast<cudaGraphConditionalHandle>(condition);
  params.conditional.type = cudaGraphCondTypeWhile;
  params.conditional.size = 1;
  cudaGraphNode_t node = nullptr;
  GROVE_CUDA_CHECK(cudaGraphAddNode(&node, parent, before.data(), nullptr, before.size(), &params),
                   "adding a WHILE node on ", where(),
                   " (the condition must come from create_while_condition of the same graph)");
  cudaGraph_t body_graph = params.conditional.phGraph_out[0];
  cudaGraph_t captured = graph_of(body).graph;
  cudaGraphNode_t child = nullptr;
  cudaError_t status = cudaGraphAddChildGraphNode(&child, body_graph, nullptr, 0, captured);
  // Note [WHILE bodies without programmatic edges]: library kernels captured
  // with programmatic dependent launch (cuBLAS's nvjet GEMMs) leave
  // programmatic edges, which a conditional body may refuse; made default
  // edges (full completion, which a programmatic wait also accepts) the body
  // computes the same. Tried only once CUDA refused the body as captured.
  if (status != cudaSuccess) {
    const std::string contents = describe_graph_contents(captured);
    cudaGetLastError();
    if (make_edges_default(captured) > 0) {
      status = cudaGraphAddChildGraphNode(&child, body_graph, nullptr, 0, captured);
    }
    if (status != cudaSuccess) {
      throw_cuda_error(
          status, "cudaGraphAddChildGraphNode",
          str_cat("adding the body of a WHILE node on ", where(),
                  " (a body may hold kernels, copies, memsets and conditionals only; this body: ",
                  contents, ")"));
    }
  }
}

size_t CudaPlatform::graph_node_count(GraphHandle graph) {
  size_t count = 0;
  GROVE_CUDA_CHECK(cudaGraphGetNodes(graph_of(graph).graph, nullptr, &count),
                   "counting the nodes of a graph on ", where());
  return count;
}

size_t CudaPlatform::graph_programmatic_edge_count(GraphHandle graph) {
  use_device();
  cudaGraph_t g = graph_of(graph).graph;
  size_t edges = 0;
  GROVE_CUDA_CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges),
                   "counting the edges of a graph on ", where());
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  std::vector<cudaGraphEdgeData> data(edges);
  if (edges > 0) {
    GROVE_CUDA_CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &edges),
                     "listing the edges of a graph on ", where());
  }
  return static_cast<size_t>(std::count_if(data.begin(), data.end(), [](const auto& edge) {
    return edge.type != cudaGraphDependencyTypeDefault;
  }));
}

std::string CudaPlatform::graph_dot(GraphHandle graph) {
  CudaGraph& g = graph_of(graph);
  const char* tmpdir = std::getenv("TMPDIR");
  std::string path =
      str_cat(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp", "/grove_graph_XXXXXX");
  int fd = mkstemp(path.data());
  GROVE_CHECK_AS(DeviceError, fd >= 0, "graph_dot: cannot create a temporary file ", path,
                 " for cudaGraphDebugDotPrint; set TMPDIR to a writable directory");
  close(fd);
  cudaError_t status = cudaGraphDebugDotPrint(g.graph, path.c_str(),
                                              cudaGraphDebugDotFlagsKernelNodeParams |
                                                  cudaGraphDebugDotFlagsMemcpyNodeParams |
                                                  cudaGraphDebugDotFlagsMemsetNodeParams);
  if (status != cudaSuccess) {
    std::remove(path.c_str());
    throw_cuda_error(status, "cudaGraphDebugDotPrint",
                     str_cat("writing a graph of ", where(), " as DOT to ", path));
  }
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  std::remove(path.c_str());
  // A legend of kernel nodes by grove's kernel-node index, as DOT comments.
  std::string dot = text.str();
  std::string legend = "// grove kernel nodes (kernel_node_index: name):\n";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::vector<cudaGraphNode_t>& nodes = kernel_nodes_of(g);
    for (size_t i = 0; i < nodes.size(); ++i) {
      legend += str_cat("//   ", i, ": ", kernel_node_name(g, nodes[i]), "\n");
    }
  }
  return dot + legend;
}

void CudaPlatform::release_graph(CudaGraph* graph) noexcept {
  if (--graph->references > 0) return;
  cudaGraphDestroy(graph->graph);
  cudaGetLastError();
  delete graph;
}

void CudaPlatform::destroy_graph(GraphHandle graph) {
  if (!graph) return;
  std::lock_guard<std::mutex> lock(mutex_);
  release_graph(&graph_of(graph));
}

void CudaPlatform::destroy_graph_exec(GraphExecHandle exec) {
  if (!exec) return;
  CudaGraphExec* e = &exec_of(exec);
  use_device();
  cudaError_t status = cudaGraphExecDestroy(e->exec);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    release_graph(e->source);
  }
  delete e;
  if (status != cudaSuccess) {
    throw_cuda_error(status, "cudaGraphExecDestroy",
                     str_cat("destroying an executable graph on ", where()));
  }
}

}  // namespace grove::runtime::cuda_detail
