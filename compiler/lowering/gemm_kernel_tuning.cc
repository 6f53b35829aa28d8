#include "compiler/lowering/gemm_kernel_tuning.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "compiler/codegen/kernel_compiler.h"
#include "compiler/lowering/gemm_tuning_table.h"
#include "compiler/lowering/tiny_k_gemm.h"
#include "runtime/blas.h"
#include "runtime/compile_profile.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace grove::compiler::lowering {
namespace {

using runtime::DType;
using runtime::GemmArgs;
using runtime::GemmEpilogue;

// Elements a row-major (or transposed) rows x cols matrix with leading
// dimension `ld` spans.
int64_t extent(bool transposed, int64_t rows, int64_t cols, int64_t ld) {
  if (rows == 0 || cols == 0) return 0;
  return transposed ? (cols - 1) * ld + rows : (rows - 1) * ld + cols;
}

// Note [One small-M choice per shape]: "eager" and "cudagraphs" lower the same
// program separately, and their results must be bitwise equal, so both must run
// the same kernel for a GEMM. A measurement is noisy, so a shape is measured
// at most once per process: the choice (from the table, a measurement or the
// heuristic) is kept here by key and every later compile reads it; across
// processes the table on disk keeps it. Test:
// SmallMGemmOnDevice.EagerAndCudagraphsAgreeBitwiseWithTheKernelChosen.
std::mutex& choices_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Key -> the chosen variant (false: the library GEMM).
std::map<std::string, SmallMVariant>& choices() {
  static std::map<std::string, SmallMVariant> map;
  return map;
}

constexpr int kLaunchesPerGraph = 20;
constexpr int kGraphLaunches = 10;
// Note [Small-M GEMM timing from HBM].
constexpr int64_t kStreamedWeightBytes = int64_t{4} << 20;
constexpr int64_t kWeightCopiesBytes = int64_t{128} << 20;
constexpr int kRounds = 3;

// Device memory freed on every path out of the measurement.
class DeviceBuffers {
 public:
  explicit DeviceBuffers(runtime::Platform& platform) : platform_(platform) {}
  ~DeviceBuffers() {
    for (void* pointer : pointers_) platform_.free_raw(pointer);
  }
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  void* zeros(int64_t elements, DType dtype, runtime::StreamHandle stream) {
    const size_t bytes =
        static_cast<size_t>(std::max<int64_t>(elements, 1)) * runtime::dtype_size(dtype);
    pointers_.push_back(platform_.allocate_raw(bytes));
    platform_.memset_async(pointers_.back(), 0, bytes, stream);
    return pointers_.back();
  }

 private:
  runtime::Platform& platform_;
  std::vector<void*> pointers_;
};

// GPU time per call of `enqueue`, from a CUDA graph of kLaunchesPerGraph
// calls (a graph, as cudagraphs runs them: stream launches would time the
// host's launch rate instead).
double graph_time_us(runtime::Platform& platform, runtime::StreamHandle stream,
                     const std::function<void(int)>& enqueue) {
  enqueue(0);
  platform.synchronize_stream(stream);
  platform.begin_capture(stream, runtime::CaptureMode::kThreadLocal);
  try {
    for (int i = 0; i < kLaunchesPerGraph; ++i) enqueue(i);
  } catch (...) {
    platform.invalidate_capture(stream);
    try {
      platform.end_capture(stream);
    } catch (...) {
    }
    throw;
  }
  runtime::GraphHandle graph = platform.end_capture(stream);
  runtime::GraphExecHandle exec = platform.instantiate(graph, {});
  runtime::EventHandle start = platform.create_event(true);
  runtime::EventHandle stop = platform.create_event(true);
  platform.launch_graph(exec, stream);
  platform.record_event(start, stream);
  for (int i = 0; i < kGraphLaunches; ++i) platform.launch_graph(exec, stream);
  platform.record_event(stop, stream);
  platform.synchronize_event(stop);
  const double us =
      1000.0 * platform.elapsed_ms(start, stop) / (kGraphLaunches * kLaunchesPerGraph);
  platform.destroy_event(start);
  platform.destroy_event(stop);
  platform.destroy_graph_exec(exec);
  platform.destroy_graph(graph);
  return us;
}

// Note [Small-M GEMM variants]: which grouping of A's rows is fastest depends
// on the shape (more groups: more warps and fewer accumulators per lane, but
// B read once per group), so auto times each variant of
// small_m_row_variants as well as the library GEMM, and keeps the fastest
// kernel's rows per warp with its time. Tests:
// SmallMGemmKernel.EveryRowVariantMatchesTheReference (each variant's sums),
// GemmTuningTable.* (grove_rows read and written).
// Times grove's kernel variants and the library GEMM for `launch` on `device`
// (zeros as data). nullopt, after a warning, when anything fails.
std::optional<GemmTuningEntry> measure(const GemmLaunch& launch, runtime::Device device,
                                       GemmKernelForm form, bool tiled) {
  const bool transposed = form == GemmKernelForm::kTransposed;
  try {
    runtime::DeviceContext& context = runtime::device_context(device);
    runtime::Platform& platform = context.platform();
    if (platform.capture_status(context.current_stream()) != runtime::CaptureStatus::kNone) {
      return std::nullopt;  // compiling inside a capture: no device work now
    }
    const std::vector<SmallMVariant> variants =
        form == GemmKernelForm::kTinyK ? std::vector<SmallMVariant>{{1, 1}}
        : transposed                   ? small_m_variants(launch.args.n, launch.args.m)
                                       : small_m_variants(launch.args.m, launch.args.n);
    std::vector<AssembledKernel> assembled;
    for (const SmallMVariant& variant : variants) {
      assembled.push_back(
          form == GemmKernelForm::kTinyK
              ? tiny_k_gemm_kernel(launch)
              : small_m_gemm_kernel(launch, variant.rows, transposed, variant.columns));
    }
    // Note [Kernels generated side by side] (compiler/codegen/kernel_compiler.cc).
    std::vector<const codegen::KernelSpec*> specs;
    for (const AssembledKernel& kernel : assembled) specs.push_back(&kernel.spec);
    const std::vector<codegen::CompiledKernel> kernels = codegen::compile_kernels(specs, device);
    // Note [Tiles loaded for the tuning] (runtime/cuda/small_m_tiled_gemm.cc):
    // the tiles JIT side by side with the candidates above, and every JIT
    // in flight ends before anything is timed, so the times are taken on a
    // host with no JIT running, as before the loads went to the background
    // (Note [Kernels loaded in the background]).
    if (tiled) platform.blas().preload_small_m_tiled_kernels(launch.args.dtype);
    platform.wait_for_kernel_loads();
    runtime::StreamHandle stream = platform.create_stream();
    std::optional<GemmTuningEntry> entry;
    try {
      DeviceBuffers buffers(platform);
      GemmArgs args = launch.args;
      args.a =
          buffers.zeros(extent(args.transpose_a, args.m, args.k, args.lda), args.dtype, stream);
      // Note [Small-M GEMM timing from HBM]: a weight of at least
      // kStreamedWeightBytes belongs to a model larger than the L2, whose
      // GEMMs read their weights from HBM; timed on one copy, 32 launches in
      // a row would read it from the L2 after the first and favour whichever
      // kernel is better at L2 reads. Such a weight is timed over copies that
      // together exceed the L2 (the launches take them in turn). Smaller
      // weights are timed as they are, from the L2, as small models run.
      const int64_t b_elements = extent(args.transpose_b, args.k, args.n, args.ldb);
      const int64_t weight_bytes =
          b_elements * static_cast<int64_t>(runtime::dtype_size(args.dtype));
      const int64_t copies =
          weight_bytes < kStreamedWeightBytes
              ? 1
              : std::min<int64_t>(kLaunchesPerGraph,
                                  (kWeightCopiesBytes + weight_bytes - 1) / weight_bytes);
      std::vector<const void*> weights;
      for (int64_t copy = 0; copy < copies; ++copy) {
        weights.push_back(buffers.zeros(b_elements, args.dtype, stream));
      }
      args.b = weights[0];
      args.c = buffers.zeros(extent(false, args.m, args.n, args.ldc), args.dtype, stream);
      if (gemm_epilogue_has_bias(args.epilogue))
        args.bias = buffers.zeros(args.n, args.dtype, stream);
      if (args.epilogue == GemmEpilogue::kBiasGeluAux || args.epilogue == GemmEpilogue::kDGelu) {
        args.aux = buffers.zeros(extent(false, args.m, args.n, args.ld_aux), args.dtype, stream);
      }
      // In the kernel's input order (small_m_gemm_kernel): A, B, bias, gelu's input.
      // (Note [Small-N GEMMs as their transpose]: B, then A.)
      std::vector<const void*> inputs = {args.a, args.b};
      if (transposed) std::swap(inputs[0], inputs[1]);
      const size_t weight_input = transposed ? 0 : 1;
      if (gemm_epilogue_has_bias(args.epilogue)) inputs.push_back(args.bias);
      if (args.epilogue == GemmEpilogue::kDGelu) inputs.push_back(args.aux);
      // Each variant's own outputs: one per row of A its warps reduce (and
      // the pre-activation's), at their offsets into C (and aux).
      std::vector<std::vector<void*>> outputs(variants.size());
      for (size_t v = 0; v < variants.size(); ++v) {
        for (size_t o = 0; o < assembled[v].output_slots.size(); ++o) {
          void* base = assembled[v].output_slots[o] == launch.c_slot ? args.c : args.aux;
          outputs[v].push_back(static_cast<char*>(base) +
                               assembled[v].output_offsets[o] *
                                   static_cast<int64_t>(runtime::dtype_size(args.dtype)));
        }
      }
      platform.blas().prepare_gemm(stream);
      GemmTuningEntry times{1e30, 1e30};
      std::vector<double> variant_us(variants.size(), 1e30);
      for (int round = 0; round < kRounds; ++round) {
        for (size_t v = 0; v < variants.size(); ++v) {
          variant_us[v] = std::min(variant_us[v], graph_time_us(platform, stream, [&](int i) {
                                     std::vector<const void*> operands = inputs;
                                     operands[weight_input] =
                                         weights[static_cast<size_t>(i) % weights.size()];
                                     codegen::launch(kernels[v], operands, outputs[v], {}, stream);
                                   }));
        }
        times.library_us = std::min(times.library_us, graph_time_us(platform, stream, [&](int i) {
                                      GemmArgs call = args;
                                      call.b = weights[static_cast<size_t>(i) % weights.size()];
                                      platform.blas().gemm_row_major(stream, call);
                                    }));
      }
      // Note [Small-M tiled GEMM]: each tile of cuda's tiled kernel, through
      // the BLAS as the lowering will run it.
      const std::vector<runtime::SmallMTile> tiles =
          tiled ? runtime::small_m_tiled_gemm_tiles() : std::vector<runtime::SmallMTile>{};
      std::vector<double> tile_us(tiles.size(), 1e30);
      bool tiles_timed = !tiles.empty();
      try {
        for (int round = 0; round < kRounds; ++round) {
          for (size_t t = 0; t < tiles.size(); ++t) {
            tile_us[t] = std::min(tile_us[t], graph_time_us(platform, stream, [&](int i) {
                                    GemmArgs call = args;
                                    call.b = weights[static_cast<size_t>(i) % weights.size()];
                                    call.tile_rows = tiles[t].rows;
                                    call.tile_columns = tiles[t].columns;
                                    call.tile_warps = tiles[t].warps;
                                    call.tile_transposed = transposed;
                                    platform.blas().gemm_row_major(stream, call);
                                  }));
          }
        }
      } catch (const std::exception& error) {
        // The generated kernel's and the library's times still stand.
        tiles_timed = false;
        log(LogLevel::kWarn, str_cat("small-M GEMM: could not time the tiled kernel for ",
                                     small_m_gemm_tuning_key("?", launch.args), " (", error.what(),
                                     "); leaving it out for this shape"));
      }
      platform.synchronize_stream(stream);
      if (tiles_timed) {
        const size_t fastest =
            static_cast<size_t>(std::min_element(tile_us.begin(), tile_us.end()) - tile_us.begin());
        times.tiled_us = tile_us[fastest];
        times.tiled_rows = tiles[fastest].rows;
        times.tiled_columns = tiles[fastest].columns;
        times.tiled_warps = tiles[fastest].warps;
      }
      const size_t best = static_cast<size_t>(
          std::min_element(variant_us.begin(), variant_us.end()) - variant_us.begin());
      times.grove_us = variant_us[best];
      times.grove_rows = variants[best].rows;
      times.grove_columns = variants[best].columns;
      entry = times;
    } catch (...) {
      platform.destroy_stream(stream);
      throw;
    }
    platform.destroy_stream(stream);
    return entry;
  } catch (const std::exception& error) {
    log(LogLevel::kWarn,
        str_cat("small-M GEMM: could not time ", small_m_gemm_tuning_key("?", launch.args), " on ",
                device.str(), " (", error.what(), "); using the shape heuristic for it"));
    return std::nullopt;
  }
}

// A table entry's variant for the kernel's m x n, checked against the shape
// (an entry written by hand or for another shape falls back to the default).
SmallMVariant entry_variant(const GemmTuningEntry& entry, int64_t m, int64_t n) {
  const std::vector<SmallMVariant> variants = small_m_variants(m, n);
  const SmallMVariant variant{entry.grove_rows, entry.grove_columns};
  return std::find(variants.begin(), variants.end(), variant) != variants.end()
             ? variant
             : SmallMVariant{small_m_rows_per_warp(m), 1};
}

// Note [Tiled picks by a margin]: the tuning times each candidate alone, 32
// launches of one GEMM in a row. Inside a model the tiled small-M kernel did
// worse than there: session 22 r1 (H200) timed nn.TransformerDecoder b1's
// call from C++ at 92.6 us with the tiled picks against 86.2 with the
// generated small-M kernels (GROVE_SMALL_M_TILED=0), where the tuning had
// timed the tiled kernel 9 to 19% faster than the generated one for each of
// TD's five shapes. So the tiled kernel is the choice only where it beat both
// others by kDefaultTiledMargin of their times (session 21's MLP-Mixer b1
// wins, 29 to 34%, stay): r2 timed TD b1 at 83.0 us per call (C++ call 78.8)
// against 86.8 (82.5) with the plain comparison, in one process.
// GROVE_SMALL_M_TILED_MARGIN sets the fraction (in [0, 1); 0: the plain
// comparison, the path before); the choices of each margin are cached apart.
// Tests:
// GemmTuningTableTest.TiledPicksNeedTheirMargin.
double tiled_margin() {
  constexpr double kDefaultTiledMargin = 0.2;
  const char* value = std::getenv("GROVE_SMALL_M_TILED_MARGIN");
  if (value == nullptr || *value == '\0') return kDefaultTiledMargin;
  char* end = nullptr;
  const double margin = std::strtod(value, &end);
  GROVE_CHECK_AS(ConfigError, end != value && *end == '\0' && margin >= 0 && margin < 1,
                 "GROVE_SMALL_M_TILED_MARGIN='", value,
                 "': expected a fraction in [0, 1) (0.2 by default; 0: the tiled kernel "
                 "wherever it timed fastest)");
  return margin;
}

}  // namespace

// Note [Small-M GEMM selection], auto on a present cuda device. Each form's
// measurements have keys of their own (transposed, tiny-K, without column tiles).

SmallMVariant tuned_gemm_kernel(const GemmLaunch& launch, runtime::Device device, bool grove_only,
                                GemmKernelForm form) {
  const bool transposed = form == GemmKernelForm::kTransposed;
  // Note [Small-M tiled GEMM]: timed with the others where it qualifies.
  const bool tiled = runtime::small_m_tiled_gemm_enabled() &&
                     ((form == GemmKernelForm::kSmallM && small_m_tiled_qualifies(launch)) ||
                      (transposed && small_n_tiled_qualifies(launch)));
  runtime::Platform& platform = runtime::device_context(device).platform();
  // Note [GEMM algorithms by measurement]: the library side of the
  // comparison is another GEMM with the search on, so its choices are its own.
  const std::string key =
      small_m_gemm_tuning_key(
          platform.name() + (runtime::gemm_search_enabled() ? "+gemm_search" : ""), launch.args) +
      (transposed ? "|transposed" : "") + (form == GemmKernelForm::kTinyK ? "|tiny k" : "") +
      (small_m_column_tiles_enabled() || form == GemmKernelForm::kTinyK ? "" : "|no column tiles") +
      (tiled ? "|tiled v2" : "");
  const int64_t kernel_m = transposed ? launch.args.n : launch.args.m;
  const int64_t kernel_n = transposed ? launch.args.m : launch.args.n;
  const SmallMVariant default_variant = form == GemmKernelForm::kTinyK
                                            ? SmallMVariant{1, 1}
                                            : SmallMVariant{small_m_rows_per_warp(kernel_m), 1};
  // Note [Tiled picks by a margin]: the choices of each margin apart.
  const double margin = tiled ? tiled_margin() : 0;
  const std::string choice_key = margin > 0 ? str_cat(key, "|margin ", margin) : key;
  const std::string grove_key = choice_key + "|grove variant";
  std::lock_guard<std::mutex> lock(choices_mutex());
  auto known = choices().find(grove_only ? grove_key : choice_key);
  if (known != choices().end()) return known->second;
  GemmTuningTable table(GemmTuningTable::default_path());
  table.load();
  SmallMVariant choice =
      !transposed && small_m_gemm_heuristic(launch.args) ? default_variant : SmallMVariant{};
  SmallMVariant grove_variant = default_variant;
  // The fastest of the generated kernel's variant, the tiled kernel's tile
  // (Note [Small-M tiled GEMM]) and the library.
  // grove_only (Note [Exact gelu in the small-M GEMM]): the faster of the
  // first two, which both apply the exact gelu.
  auto tiled_variant = [&](const GemmTuningEntry& entry) {
    const runtime::SmallMTile tile{static_cast<int32_t>(entry.tiled_rows),
                                   static_cast<int32_t>(entry.tiled_columns),
                                   static_cast<int32_t>(entry.tiled_warps)};
    return tiled && entry.tiled_us > 0 && runtime::small_m_tile_known(tile)
               ? SmallMVariant{entry.tiled_rows, entry.tiled_columns, /*tiled=*/true,
                               entry.tiled_warps}
               : SmallMVariant{};
  };
  // Sets grove_variant from `entry` and returns the choice.
  auto choose = [&](const GemmTuningEntry& entry) {
    const SmallMVariant generated =
        form == GemmKernelForm::kTinyK ? default_variant : entry_variant(entry, kernel_m, kernel_n);
    const SmallMVariant tiled_choice = tiled_variant(entry);
    grove_variant =
        tiled_choice && entry.tiled_us < entry.grove_us * (1 - margin) ? tiled_choice : generated;
    if (tiled_choice && entry.tiled_fastest(margin)) return tiled_choice;
    return entry.grove_faster() ? generated : SmallMVariant{};
  };
  if (std::optional<GemmTuningEntry> entry = table.find(key)) {
    choice = choose(*entry);
  } else if (std::optional<GemmTuningEntry> measured = [&] {
               runtime::CompileEventTimer timer("tuning", key);
               return measure(launch, device, form, tiled);
             }()) {
    choice = choose(*measured);
    table.store(key, *measured);
    log(LogLevel::kInfo,
        str_cat("small-M GEMM ", key, ": grove ", measured->grove_us, " us (", measured->grove_rows,
                " rows and ", measured->grove_columns, " columns per warp), tiled ",
                measured->tiled_us, " us (", measured->tiled_rows, "x", measured->tiled_columns,
                "x", measured->tiled_warps, "), library ", measured->library_us, " us per call; ",
                choice.tiled ? "tiled" : (choice ? "grove" : "library"), " chosen"));
  }
  choices()[choice_key] = choice;
  choices()[grove_key] = grove_variant;
  return grove_only ? grove_variant : choice;
}

bool tiny_k_gemm_measured_faster(const GemmLaunch& launch, runtime::Device device) {
  return static_cast<bool>(
      tuned_gemm_kernel(launch, device, /*grove_only=*/false, GemmKernelForm::kTinyK));
}

void clear_gemm_kernel_choices() {
  std::lock_guard<std::mutex> lock(choices_mutex());
  choices().clear();
}

}  // namespace grove::compiler::lowering
