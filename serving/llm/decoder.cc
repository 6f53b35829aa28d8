#include "serving/llm/decoder.h"

#include <algorithm>

#include "runtime/device_context.h"
#include "runtime/error.h"
#include "serving/llm/checkpoint_files.h"
#include "serving/llm/decode_kernels.h"

namespace grove::serving::llm {

namespace {

using compiler::backends::CompiledModel;
using runtime::Tensor;

std::vector<int64_t> default_prompt_buckets(int64_t max_seq_len) {
  std::vector<int64_t> buckets;
  for (int64_t size = 8; size < max_seq_len; size *= 2) buckets.push_back(size);
  buckets.push_back(max_seq_len);
  return buckets;
}

void check_buckets(std::vector<int64_t>& buckets, const char* what, int64_t limit) {
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  GROVE_CHECK(!buckets.empty() && buckets.front() > 0 && buckets.back() <= limit, what,
              " buckets must be positive and at most ", limit, "; got ", buckets.size(),
              " buckets from ", buckets.empty() ? 0 : buckets.front(), " to ",
              buckets.empty() ? 0 : buckets.back());
}

int64_t bucket_for(const std::vector<int64_t>& buckets, int64_t size, const char* what) {
  auto found = std::lower_bound(buckets.begin(), buckets.end(), size);
  GROVE_CHECK(found != buckets.end(), what, " of ", size, " exceeds the largest bucket ",
              buckets.back(), "; configure a larger bucket");
  return *found;
}

std::vector<float> logits_row(const std::vector<float>& all, int64_t row, int64_t vocab) {
  auto begin = all.begin() + row * vocab;
  return {begin, begin + vocab};
}

}  // namespace

Decoder::Decoder(const DecoderConfig& config, DecoderOptions options)
    : options_(std::move(options)), device_(options_.device.value_or(runtime::default_device())) {
  if (options_.max_seq_len == 0) {
    options_.max_seq_len = std::min<int64_t>(config.max_position_embeddings, 256);
  }
  if (options_.prompt_buckets.empty()) {
    options_.prompt_buckets = default_prompt_buckets(options_.max_seq_len);
  }
  check_buckets(options_.batch_buckets, "batch", 1 << 16);
  check_buckets(options_.prompt_buckets, "prompt", options_.max_seq_len);
  CacheShape cache{.slots = options_.batch_buckets.back(), .max_seq_len = options_.max_seq_len};
  state_ = std::make_unique<DecoderState>(config, cache, device_);
  backend_ = compiler::backends::make_backend(options_.backend);
}

std::unique_ptr<Decoder> Decoder::load(const std::string& model_dir, DecoderOptions options) {
  auto decoder =
      std::make_unique<Decoder>(DecoderConfig::load(model_dir, options.dtype), std::move(options));
  load_checkpoint(decoder->state(), open_checkpoint_files(model_dir));
  return decoder;
}

CompiledModel Decoder::compile_program(const compiler::ir::Program& program,
                                       const std::string& small_m_gemm) {
  compiler::backends::CompileOptions options{.backend = options_.backend, .device = device_};
  options.small_m_gemm = small_m_gemm;
  const DecoderState& state = *state_;
  return compiler::backends::compile(
      program, options, [&state](const compiler::ir::Value& value) { return state.bind(value); },
      backend_);
}

const CompiledModel& Decoder::prefill_model(int64_t bucket, bool chunk) {
  std::map<int64_t, CompiledModel>& models = chunk ? chunk_models_ : prefill_models_;
  auto found = models.find(bucket);
  if (found != models.end()) return found->second;
  CompiledModel model =
      compile_program(build_prefill_program(config(), state_->cache(), bucket, device_, chunk),
                      options_.prefill_small_m_gemm);
  return models.emplace(bucket, std::move(model)).first->second;
}

const CompiledModel& Decoder::decode_model(int64_t bucket) {
  auto found = decode_models_.find(bucket);
  if (found != decode_models_.end()) return found->second;
  CompiledModel model =
      compile_program(build_decode_program(config(), state_->cache(), bucket, device_,
                                           options_.fused_attention, options_.fused_norms),
                      options_.decode_small_m_gemm);
  return decode_models_.emplace(bucket, std::move(model)).first->second;
}

int64_t Decoder::prompt_bucket(int64_t length) const {
  return bucket_for(options_.prompt_buckets, length, "a prompt");
}

int64_t Decoder::batch_bucket(int64_t rows) const {
  return bucket_for(options_.batch_buckets, rows, "a decode batch");
}

void Decoder::warm_up() {
  // Note [Decode buckets share one pool]: padding rows (position -1) and slot
  // -1 write nothing into the cache.
  for (auto bucket = options_.batch_buckets.rbegin(); bucket != options_.batch_buckets.rend();
       ++bucket) {
    const CompiledModel& model = decode_model(*bucket);
    std::vector<int64_t> tokens(static_cast<size_t>(*bucket), 0);
    std::vector<int64_t> positions(static_cast<size_t>(*bucket), -1);
    for (int call = 0; call < 2; ++call) {
      model({Tensor::from_vector(tokens, {*bucket}, device_),
             Tensor::from_vector(positions, {*bucket}, device_)});
    }
  }
  // Prefill buckets, then (with chunked_prefill) chunk buckets, largest
  // first; their keys and values are not written, so the cache stays as it was.
  for (bool chunk : {false, true}) {
    if (chunk && !options_.chunked_prefill) break;
    for (auto bucket = options_.prompt_buckets.rbegin(); bucket != options_.prompt_buckets.rend();
         ++bucket) {
      const CompiledModel& model = prefill_model(*bucket, chunk);
      std::vector<int64_t> tokens(static_cast<size_t>(*bucket), 0);
      for (int call = 0; call < 2; ++call) {
        compiler::TensorList inputs = {Tensor::from_vector(tokens, {*bucket}, device_),
                                       Tensor::from_vector(std::vector<int64_t>{0}, {1}, device_)};
        if (chunk) {
          inputs.push_back(Tensor::from_vector(std::vector<int64_t>{0}, {1}, device_));
          inputs.push_back(Tensor::from_vector(std::vector<int64_t>{0}, {1}, device_));
        }
        model(inputs);
      }
    }
  }
}

std::vector<float> Decoder::prefill(int64_t slot, std::span<const int64_t> prompt) {
  return run_prefill(slot, prompt, 0);
}

std::vector<float> Decoder::prefill_chunk(int64_t slot, std::span<const int64_t> tokens,
                                          int64_t start) {
  return run_prefill(slot, tokens, start);
}

std::vector<float> Decoder::run_prefill(int64_t slot, std::span<const int64_t> tokens,
                                        int64_t start) {
  const int64_t length = static_cast<int64_t>(tokens.size());
  const int64_t positions = state_->cache().max_seq_len;
  GROVE_CHECK(slot >= 0 && slot < state_->cache().slots, "prefill into slot ", slot,
              ": slots are 0..", state_->cache().slots - 1);
  GROVE_CHECK(length > 0, "prefill of an empty prompt; a prompt needs at least one token");
  GROVE_CHECK(start >= 0 && start + length <= positions, "prefill of ", length,
              " tokens at position ", start, " of slot ", slot, ": the cache has ", positions,
              " positions (max_seq_len)");
  const int64_t bucket = prompt_bucket(length);
  for (int64_t token : tokens) {
    GROVE_CHECK(token >= 0 && token < config().vocab_size, "prompt token ", token,
                " is outside the vocabulary [0, ", config().vocab_size, ")");
  }
  std::vector<int64_t> padded(tokens.begin(), tokens.end());
  padded.resize(static_cast<size_t>(bucket), 0);
  const bool chunk = start > 0;
  compiler::TensorList inputs = {
      Tensor::from_vector(padded, {bucket}, device_),
      Tensor::from_vector(std::vector<int64_t>{length - 1}, {1}, device_)};
  if (chunk) {
    inputs.push_back(Tensor::from_vector(std::vector<int64_t>{slot}, {1}, device_));
    inputs.push_back(Tensor::from_vector(std::vector<int64_t>{start}, {1}, device_));
  }
  compiler::TensorList outputs = prefill_model(bucket, chunk)(inputs);
  // Note [Prefill cache writes]: the prompt's keys and values into its slot.
  const DecoderConfig& c = config();
  launch_kv_write_span(
      kv_write_table(state_->cache_tensors(), {outputs.begin() + 1, outputs.end()}),
      2 * c.num_layers, slot, start, length, c.num_kv_heads, positions, c.head_dim(), c.dtype);
  return outputs.at(0).to_vector<float>();
}

std::vector<std::vector<float>> Decoder::decode(const std::vector<DecodeRow>& rows) {
  GROVE_CHECK(!rows.empty(), "decode step with no rows");
  int64_t highest = 0;
  for (const DecodeRow& row : rows) {
    GROVE_CHECK(row.slot >= 0 && row.slot < state_->cache().slots, "decode row of slot ", row.slot,
                ": slots are 0..", state_->cache().slots - 1);
    GROVE_CHECK(row.position >= 0 && row.position < state_->cache().max_seq_len,
                "decode row of slot ", row.slot, " at position ", row.position,
                ": positions are 0..", state_->cache().max_seq_len - 1,
                "; the request outgrew max_seq_len");
    GROVE_CHECK(row.token >= 0 && row.token < config().vocab_size, "decode token ", row.token,
                " is outside the vocabulary [0, ", config().vocab_size, ")");
    highest = std::max(highest, row.slot);
  }
  const int64_t bucket = batch_bucket(highest + 1);
  std::vector<int64_t> tokens(static_cast<size_t>(bucket), 0);
  std::vector<int64_t> positions(static_cast<size_t>(bucket), -1);
  for (const DecodeRow& row : rows) {
    GROVE_CHECK(positions[static_cast<size_t>(row.slot)] < 0, "decode step names slot ", row.slot,
                " twice");
    tokens[static_cast<size_t>(row.slot)] = row.token;
    positions[static_cast<size_t>(row.slot)] = row.position;
  }
  Tensor positions_tensor = Tensor::from_vector(positions, {bucket}, device_);
  compiler::TensorList outputs =
      decode_model(bucket)({Tensor::from_vector(tokens, {bucket}, device_), positions_tensor});
  write_new_rows(kv_write_table(state_->cache_tensors(), {outputs.begin() + 1, outputs.end()}),
                 positions_tensor);
  std::vector<float> all = outputs.at(0).to_vector<float>();
  std::vector<std::vector<float>> result;
  result.reserve(rows.size());
  for (const DecodeRow& row : rows)
    result.push_back(logits_row(all, row.slot, config().vocab_size));
  return result;
}

void Decoder::move_slot(int64_t from, int64_t to) {
  const int64_t slots = state_->cache().slots;
  GROVE_CHECK(from >= 0 && from < slots && to >= 0 && to < slots && from != to, "move of slot ",
              from, " to slot ", to, ": slots are 0..", slots - 1, " and must differ");
  runtime::DeviceContext& context = runtime::device_context(device_);
  const runtime::StreamHandle stream = context.current_stream();
  for (const Tensor& cache : state_->cache_tensors()) {
    const Tensor source = cache.slice(0, from, from + 1);
    context.platform().copy_async(cache.slice(0, to, to + 1).data_ptr(), source.data_ptr(),
                                  source.nbytes(), runtime::CopyKind::kDeviceToDevice, stream);
  }
  context.platform().synchronize_stream(stream);
}

void Decoder::write_new_rows(const Tensor& table, const Tensor& positions) const {
  const DecoderConfig& c = config();
  launch_kv_write(table, 2 * c.num_layers, positions, c.num_kv_heads, state_->cache().max_seq_len,
                  c.head_dim(), c.dtype);
}

}  // namespace grove::serving::llm
