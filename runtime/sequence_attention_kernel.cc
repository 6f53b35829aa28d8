#include "runtime/sequence_attention_kernel.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::runtime {
namespace {

constexpr const char* kPtx =
#include "runtime/sequence_attention_kernel_ptx.inc"
    ;
constexpr const char* kProgrammaticPtx =
#include "runtime/sequence_attention_kernel_programmatic_ptx.inc"
    ;
constexpr int64_t kWarps = kSequenceAttentionThreads / 32;
constexpr int64_t kMaxGridDim = 65535;  // CUDA's limit for grid y and z
// Query rows per block: halved (down to one per warp) while the grid has
// fewer blocks than this, so that short batches still spread over the SMs.
constexpr int64_t kWideRows = 16;
constexpr int64_t kBlocksWanted = 264;
// Positions one staging pass of the kernels loads (4 warps x 8 rows), and of
// the wide ones (x 16): Note [Sequence attention staging passes].
constexpr int64_t kPassRows = 32;

// Note [Sequence attention staging passes]: the kernel stages keys, values and
// the block's queries in passes of kPassRows positions, each costing one
// memory latency, so 48 keys (nn.TransformerDecoder's cross attention) took
// two. The wide kernels (grove_sequence_attention_*_wide, 16 rows a warp, no
// spills on sm_90) take up to 64 positions in one pass; they run where a tile
// has more than kPassRows rows, unless GROVE_SEQUENCE_ATTENTION_WIDE=0. The
// arithmetic is the same (staging only moves data). Test:
// SequenceAttention.SixtyFourKeysStageInOnePassAndMatchTheReference.
bool wide_staging(int64_t rows) {
  if (rows <= kPassRows) return false;
  const char* setting = std::getenv("GROVE_SEQUENCE_ATTENTION_WIDE");
  return setting == nullptr || std::string(setting) != "0";
}

// Note [Sequence attention staged by cp.async]: f32 operands need no
// conversion, so the kernel stages them as asynchronous copies straight into
// shared memory (grove_sequence_attention_f32_async, stage_async in the .cu),
// through the same strides: every copy of the block is in flight at once (one
// memory latency, as stage()'s register batches were) from a short loop,
// where stage()'s fully unrolled batches held them in registers: 128 a thread
// (190 for the wide kernels: two blocks an SM) and 55 KB of SASS (80 KB wide)
// for a few microseconds of work. The async kernel takes 40. Only data moves:
// the arithmetic, and so the bits, are stage()'s. bf16 and f16 are converted
// as they are staged, so they keep stage(); GROVE_SEQUENCE_ATTENTION_ASYNC=0
// keeps it for f32 too. Test:
// SequenceAttention.AsyncStagingGivesTheBitsOfRegisterStaging.
//
// Note [Sequence attention in vectors]: round 1 of session 19 (H200, ncu on
// ViT's batch-1 attention) found the cp.async kernel bound by its warps'
// instruction latency (5.6 cycles an instruction, 3.7 warps an SM): each row
// is a warp's serial chain of shared-memory loads. Where every feature count
// is a multiple of 4, the _vector kernel pads the keys to d + 4 (rows 16-byte
// aligned; lanes reading float4s of eight keys a phase hit distinct banks)
// and reads query and key four features a load into the same four sums, and
// the values two features a lane a load into each feature's own two sums:
// the sums and their order are the scalar loop's, so the bits are too. The
// default for f32 where the padded keys fit; GROVE_SEQUENCE_ATTENTION_ASYNC=1
// keeps the scalar cp.async kernel. Tested with the other forms
// (AsyncStagingGivesTheBitsOfRegisterStaging: bitwise equal on an H100 in
// session 19's round 2).
const char* async_suffix(DType dtype) {
  if (dtype != DType::kF32) return nullptr;
  const char* setting = std::getenv("GROVE_SEQUENCE_ATTENTION_ASYNC");
  if (setting == nullptr) return "_vector";
  const std::string text = setting;
  if (text == "0") return nullptr;
  return text == "vector" ? "_vector" : "_async";
}

// The operands as [batch, head, position, feature] strides (the mask's: [batch,
// head, query, key], 0 where it broadcasts) and the sizes.
struct Plan {
  int64_t batch = 1, heads = 1, group = 1, tq = 0, tk = 0, d = 0, dv = 0;
  int64_t query[4] = {}, key[4] = {}, value[4] = {}, result[4] = {}, mask[4] = {};
  int64_t mask_kind = 0;  // 0 none, 1 bool, 2 additive
};

// Keys [tk][d + 1], values [tk][dv], the block's query rows [rows][d] and
// each warp's weights [tk] (sequence_attention_kernel.cu).
int64_t shared_floats(int64_t tk, int64_t d, int64_t dv, int64_t rows, int64_t warps = kWarps,
                      int64_t key_pad = 1) {
  return tk * (d + key_pad) + tk * dv + rows * d + warps * tk;
}

// The leading dims `sizes` [0, lead) with `strides` as one batch stride, or
// nullopt when they do not collapse (dims of size 1 do not count).
std::optional<int64_t> batch_stride(const Shape& sizes, const Shape& strides, size_t lead) {
  std::optional<int64_t> innermost;
  int64_t expected = 0;  // the stride the next outer dim needs
  for (size_t d = lead; d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (innermost && strides[d] != expected) return std::nullopt;
    if (!innermost) innermost = strides[d];
    expected = strides[d] * sizes[d];
  }
  return innermost.value_or(0);
}

// Fills `out` with the 4-d strides of `layout` over `sizes` (layout's shape
// equals sizes), or says why not.
std::string four_strides(const AttentionOperandLayout& layout, const Shape& sizes, const char* what,
                         int64_t out[4]) {
  const size_t rank = sizes.size();
  std::optional<int64_t> batch = batch_stride(sizes, layout.strides, rank - 3);
  if (!batch) {
    return str_cat(what, "'s leading dims ", shape_str(layout.shape), " with strides ",
                   shape_str(layout.strides), " (they must collapse into one batch stride)");
  }
  out[0] = *batch;
  for (size_t d = 0; d < 3; ++d) out[d + 1] = layout.strides[rank - 3 + d];
  return "";
}

// The plan of `layouts`, or the reason the kernel does not take them.
std::string make_plan(const SequenceAttentionLayouts& layouts, Plan& plan) {
  const Shape& q = layouts.query.shape;
  const Shape& k = layouts.key.shape;
  const Shape& v = layouts.value.shape;
  const size_t rank = q.size();
  if (layouts.dtype != DType::kF32 && layouts.dtype != DType::kBF16 &&
      layouts.dtype != DType::kF16) {
    return str_cat("dtype ", dtype_name(layouts.dtype), " (the kernel takes f32, bf16 and f16)");
  }
  for (const AttentionOperandLayout* operand :
       {&layouts.query, &layouts.key, &layouts.value, &layouts.result}) {
    if (operand->shape.size() != rank || operand->strides.size() != rank || rank < 3) {
      return str_cat("operands of ranks ", shape_str(q), ", ", shape_str(k), ", ", shape_str(v),
                     ", ", shape_str(layouts.result.shape),
                     " (query, key, value and result need one rank >= 3 and strides of it)");
    }
  }
  Shape lead(q.begin(), q.end() - 3);
  for (size_t d = 0; d + 3 < rank; ++d) {
    if (k[d] != q[d] || v[d] != q[d] || layouts.result.shape[d] != q[d]) {
      return "leading dims that differ between the operands";
    }
  }
  plan.heads = q[rank - 3];
  const int64_t key_heads = k[rank - 3];
  plan.tq = q[rank - 2];
  plan.d = q[rank - 1];
  plan.tk = k[rank - 2];
  plan.dv = v[rank - 1];
  if (key_heads < 1 || plan.heads % key_heads != 0 || v[rank - 3] != key_heads ||
      k[rank - 1] != plan.d || v[rank - 2] != plan.tk || plan.d < 1 || plan.dv < 1 ||
      layouts.result.shape[rank - 3] != plan.heads || layouts.result.shape[rank - 2] != plan.tq ||
      layouts.result.shape[rank - 1] != plan.dv) {
    return str_cat("operands that do not fit together: query ", shape_str(q), ", key ",
                   shape_str(k), ", value ", shape_str(v), ", result ",
                   shape_str(layouts.result.shape));
  }
  plan.group = plan.heads / key_heads;
  plan.batch = shape_numel(lead);
  const int64_t bytes = 4 * shared_floats(plan.tk, plan.d, plan.dv, kWideRows);
  if (bytes > kSequenceAttentionMaxSharedBytes) {
    return str_cat(plan.tk, " keys of ", plan.d, " features and values of ", plan.dv, " (", bytes,
                   " bytes of shared memory, at most ", kSequenceAttentionMaxSharedBytes, ")");
  }
  if (plan.heads > kMaxGridDim || plan.batch > kMaxGridDim) {
    return str_cat(plan.heads, " heads over a batch of ", plan.batch, " (at most ", kMaxGridDim,
                   " of each)");
  }
  const std::pair<const AttentionOperandLayout*, int64_t*> operands[] = {
      {&layouts.query, plan.query},
      {&layouts.key, plan.key},
      {&layouts.value, plan.value},
      {&layouts.result, plan.result}};
  const char* names[] = {"query", "key", "value", "result"};
  for (size_t i = 0; i < 4; ++i) {
    std::string refusal =
        four_strides(*operands[i].first, operands[i].first->shape, names[i], operands[i].second);
    if (!refusal.empty()) return refusal;
  }
  if (layouts.mask) {
    const AttentionOperandLayout& mask = *layouts.mask;
    if (layouts.mask_dtype != DType::kBool && layouts.mask_dtype != layouts.dtype) {
      return str_cat("a mask of dtype ", dtype_name(layouts.mask_dtype),
                     " (bool or the operands' dtype)");
    }
    Shape scores = q;
    scores[rank - 1] = plan.tk;
    if (mask.shape.size() > rank || mask.strides.size() != mask.shape.size()) {
      return str_cat("a mask ", shape_str(mask.shape), " of higher rank than the scores ",
                     shape_str(scores));
    }
    AttentionOperandLayout aligned{scores, Shape(rank, 0)};
    const size_t pad = rank - mask.shape.size();
    for (size_t d = 0; d < mask.shape.size(); ++d) {
      if (mask.shape[d] != 1 && mask.shape[d] != scores[pad + d]) {
        return str_cat("a mask ", shape_str(mask.shape), " that does not broadcast to ",
                       shape_str(scores));
      }
      if (mask.shape[d] != 1) aligned.strides[pad + d] = mask.strides[d];
    }
    std::string refusal = four_strides(aligned, scores, "the mask", plan.mask);
    if (!refusal.empty()) return refusal;
    plan.mask_kind = layouts.mask_dtype == DType::kBool ? 1 : 2;
  }
  return "";
}

// The kernel's arithmetic on the host (sim): the same sums in the same order
// per lane, block by block.

DType dtype_of_code(uint64_t code) {
  return code == 1 ? DType::kBF16 : code == 2 ? DType::kF16 : DType::kF32;
}

void host_sequence_attention(const LaunchDims* dims, const uint64_t* args) {
  const void* q = reinterpret_cast<const void*>(args[0]);
  const void* k = reinterpret_cast<const void*>(args[1]);
  const void* v = reinterpret_cast<const void*>(args[2]);
  const void* mask = reinterpret_cast<const void*>(args[3]);
  void* out = reinterpret_cast<void*>(args[4]);
  auto at = [&](int i) { return static_cast<int64_t>(args[i]); };
  int64_t qs[4], ks[4], vs[4], os[4], ms[4];
  for (int i = 0; i < 4; ++i) {
    qs[i] = at(5 + i);
    ks[i] = at(9 + i);
    vs[i] = at(13 + i);
    os[i] = at(17 + i);
    ms[i] = at(21 + i);
  }
  const int64_t tq = at(25), tk = at(26), d = at(27), dv = at(28), group = at(29);
  const int64_t mask_kind = at(30), causal = at(31), rows_per_block = at(32);
  float scale;
  std::memcpy(&scale, &args[33], sizeof(scale));
  // The element type travels in the kernel's name on cuda; here in one more slot.
  const DType dtype = dtype_of_code(args[34]);
  const float minus_infinity = -std::numeric_limits<float>::infinity();
  std::vector<float> query(static_cast<size_t>(d)), weights(static_cast<size_t>(tk));
  for (int64_t batch = 0; batch < dims->grid.z; ++batch) {
    for (int64_t head = 0; head < dims->grid.y; ++head) {
      const int64_t key_head = head / group;
      for (int64_t tile = 0; tile < dims->grid.x; ++tile) {
        const int64_t first = tile * rows_per_block;
        const int64_t end = std::min(tq, first + rows_per_block);
        for (int64_t row = first; row < end; ++row) {
          for (int64_t c = 0; c < d; ++c) {
            query[static_cast<size_t>(c)] = load_float_element(
                q, dtype, batch * qs[0] + head * qs[1] + row * qs[2] + c * qs[3]);
          }
          float most = minus_infinity;
          for (int64_t j = 0; j < tk; ++j) {
            const int64_t key_at = batch * ks[0] + key_head * ks[1] + j * ks[2];
            float partial[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            int64_t c = 0;
            for (; c + 4 <= d; c += 4) {
              for (int64_t p = 0; p < 4; ++p) {
                partial[p] =
                    std::fma(query[static_cast<size_t>(c + p)],
                             load_float_element(k, dtype, key_at + (c + p) * ks[3]), partial[p]);
              }
            }
            for (; c < d; ++c) {
              partial[0] = std::fma(query[static_cast<size_t>(c)],
                                    load_float_element(k, dtype, key_at + c * ks[3]), partial[0]);
            }
            float score = ((partial[0] + partial[1]) + (partial[2] + partial[3])) * scale;
            const int64_t mask_at = batch * ms[0] + head * ms[1] + row * ms[2] + j * ms[3];
            if (mask_kind == 1 && static_cast<const uint8_t*>(mask)[mask_at] == 0) {
              score = minus_infinity;
            } else if (mask_kind == 2) {
              score += load_float_element(mask, dtype, mask_at);
            }
            if (causal != 0 && j > row) score = minus_infinity;
            weights[static_cast<size_t>(j)] = score;
            most = std::max(most, score);
          }
          const float shift = most == minus_infinity ? 0.0f : most;
          float total = 0.0f;
          for (int64_t j = 0; j < tk; ++j) {
            float& weight = weights[static_cast<size_t>(j)];
            weight = std::exp(weight - shift);
            total += weight;
          }
          for (int64_t f = 0; f < dv; ++f) {
            float sum = 0.0f;
            for (int64_t j = 0; j < tk; ++j) {
              sum =
                  std::fma(weights[static_cast<size_t>(j)],
                           load_float_element(
                               v, dtype, batch * vs[0] + key_head * vs[1] + j * vs[2] + f * vs[3]),
                           sum);
            }
            store_float_element(out, dtype, batch * os[0] + head * os[1] + row * os[2] + f * os[3],
                                total > 0.0f ? sum / total : 0.0f);
          }
        }
      }
    }
  }
}

// Query rows per block: GROVE_SEQUENCE_ATTENTION_ROWS (4, 8 or 16) where set,
// else kWideRows halved (down to one row per warp) while the grid has fewer
// blocks than kBlocksWanted. The rows a block takes change no row's
// arithmetic, so no bits.
int64_t rows_per_block_of(const Plan& plan, int64_t warps) {
  if (const char* setting = std::getenv("GROVE_SEQUENCE_ATTENTION_ROWS")) {
    const std::string text = setting;
    GROVE_CHECK_AS(ConfigError, text == "4" || text == "8" || text == "16",
                   "GROVE_SEQUENCE_ATTENTION_ROWS='", text,
                   "': expected 4, 8 or 16 query rows per block (or unset: chosen by the grid)");
    return std::stoll(text);
  }
  int64_t rows = kWideRows;
  auto blocks = [&](int64_t r) { return (plan.tq + r - 1) / r * plan.heads * plan.batch; };
  while (rows > warps && blocks(rows) < kBlocksWanted) rows /= 2;
  return rows;
}

AttentionOperandLayout layout_of(const Tensor& tensor) {
  return AttentionOperandLayout{tensor.shape(), tensor.strides()};
}

}  // namespace

std::string sequence_attention_refusal(const SequenceAttentionLayouts& layouts) {
  Plan plan;
  return make_plan(layouts, plan);
}

void launch_sequence_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                               const Tensor& mask, const Tensor& result, float scale, bool causal,
                               StreamHandle stream) {
  SequenceAttentionLayouts layouts;
  layouts.dtype = query.dtype();
  layouts.query = layout_of(query);
  layouts.key = layout_of(key);
  layouts.value = layout_of(value);
  layouts.result = layout_of(result);
  if (mask.defined()) {
    layouts.mask = layout_of(mask);
    layouts.mask_dtype = mask.dtype();
  }
  for (const Tensor* operand : {&key, &value, &result}) {
    GROVE_CHECK_AS(DTypeError, operand->dtype() == query.dtype(),
                   "sequence attention: ", operand->str(), " is not of query's dtype ",
                   dtype_name(query.dtype()));
  }
  Plan plan;
  const std::string refusal = make_plan(layouts, plan);
  GROVE_CHECK_AS(ShapeError, refusal.empty(), "sequence attention: the kernel does not take ",
                 refusal);
  if (plan.batch == 0 || plan.heads == 0 || plan.tq == 0) return;
  const char* async = async_suffix(layouts.dtype);
  const int64_t warps = kWarps;
  const int64_t rows_per_block = rows_per_block_of(plan, warps);
  const bool vector = async != nullptr && std::string(async) == "_vector";
  if (vector && (plan.d % 4 != 0 || plan.dv % 4 != 0 ||
                 4 * shared_floats(plan.tk, plan.d, plan.dv, rows_per_block, warps, 4) >
                     kSequenceAttentionMaxSharedBytes)) {
    async = "_async";  // Note [Sequence attention in vectors]: features not in fours
  }
  const int64_t key_pad = async != nullptr && std::string(async) == "_vector" ? 4 : 1;
  const Device device = query.device();
  const int64_t dtype_code = layouts.dtype == DType::kBF16  ? 1
                             : layouts.dtype == DType::kF16 ? 2
                                                            : 0;
  KernelSource source;
  source.name = str_cat("grove_sequence_attention_", dtype_name(layouts.dtype),
                        async != nullptr                                  ? async
                        : wide_staging(std::max(plan.tk, rows_per_block)) ? "_wide"
                                                                          : "");
  if (device.is_cuda()) {
    source.ptx = kPtx;
    // Note [Programmatic generated kernels] (compiler/codegen/programmatic_ptx.h):
    // the same switch as the generated kernels, read at each launch.
    const char* programmatic = std::getenv("GROVE_PROGRAMMATIC_GENERATED");
    if (programmatic != nullptr && std::string(programmatic) == "1") {
      source.ptx_programmatic = kProgrammaticPtx;
    }
  } else {
    source.host_function = &host_sequence_attention;
  }
  const KernelHandle kernel = load_kernel_once(device, source);
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>((plan.tq + rows_per_block - 1) / rows_per_block);
  dims.grid.y = static_cast<uint32_t>(plan.heads);
  dims.grid.z = static_cast<uint32_t>(plan.batch);
  dims.block.x = static_cast<uint32_t>(32 * warps);
  dims.shared_bytes = static_cast<uint32_t>(
      4 * shared_floats(plan.tk, plan.d, plan.dv, rows_per_block, warps, key_pad));
  KernelArgs args;
  args.add_pointer(query.data_ptr())
      .add_pointer(key.data_ptr())
      .add_pointer(value.data_ptr())
      .add_pointer(mask.defined() ? mask.data_ptr() : nullptr)
      .add_pointer(result.data_ptr());
  for (const int64_t* strides : {plan.query, plan.key, plan.value, plan.result, plan.mask}) {
    for (int i = 0; i < 4; ++i) args.add_i64(strides[i]);
  }
  args.add_i64(plan.tq)
      .add_i64(plan.tk)
      .add_i64(plan.d)
      .add_i64(plan.dv)
      .add_i64(plan.group)
      .add_i64(plan.mask_kind)
      .add_i64(causal ? 1 : 0)
      .add_i64(rows_per_block)
      .add_f32(scale);
  if (!device.is_cuda()) args.add_i64(dtype_code);  // the host function's element type
  device_context(device).platform().launch_kernel(kernel, dims, args, stream);
}

}  // namespace grove::runtime
