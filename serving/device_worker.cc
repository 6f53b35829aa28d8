#include "serving/device_worker.h"

#include <pthread.h>

#include <chrono>
#include <cstring>

#include "runtime/device_context.h"
#include "runtime/logging.h"

namespace grove::serving {
namespace {

bool uses_graphs(const ServerConfig& config) { return config.backend == "cudagraphs"; }

}  // namespace

DeviceWorker::DeviceWorker(runtime::Device device,
                           std::vector<compiler::ir::Program> bucket_programs,
                           const ServerConfig& config, const ModelSignature& signature,
                           RequestQueue& queue, StatsRecorder& stats)
    : device_(device),
      programs_(std::move(bucket_programs)),
      config_(config),
      signature_(signature),
      queue_(queue),
      stats_(stats) {
  GROVE_CHECK(programs_.size() == config_.buckets.size(), "DeviceWorker for ", device_.str(), ": ",
              programs_.size(), " programs for ", config_.buckets.size(), " buckets");
}

DeviceWorker::~DeviceWorker() { join(); }

void DeviceWorker::start() {
  // The thread owns the promise: set_value() may still touch it after the
  // waiting thread has woken up and returned.
  std::promise<void> ready;
  std::future<void> started = ready.get_future();
  thread_ = std::thread([this, ready = std::move(ready)]() mutable { thread_main(ready); });
  try {
    started.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

void DeviceWorker::join() {
  if (thread_.joinable()) thread_.join();
}

void DeviceWorker::thread_main(std::promise<void>& ready) {
  // Named for per-thread CPU views (top -H, /proc/PID/task/*/comm).
  pthread_setname_np(pthread_self(), "grove-worker");
  try {
    prepare();
  } catch (...) {
    release_buckets();
    release_staging();
    ready.set_exception(std::current_exception());
    return;
  }
  ready.set_value();
  reaper_.emplace();
  serve();
  reaper_.reset();  // every answered request freed
  // Graph outputs, staging tensors and recordings belong to this thread's
  // tree manager and stream: release them here, before the thread ends.
  tree_at_exit_ = tree_stats();
  release_buckets();
  release_staging();
}

void DeviceWorker::release_buckets() {
  // Dropping the recordings goes through each model's backend (the graph
  // tree of this thread and device), then the models themselves.
  for (Bucket& bucket : buckets_) {
    if (bucket.model) bucket.model->reset_backend();
  }
  buckets_.clear();
}

void DeviceWorker::prepare() {
  auto begin = std::chrono::steady_clock::now();
  for (size_t i = 0; i < programs_.size(); ++i) {
    Bucket bucket;
    bucket.rows = config_.buckets[i];
    bucket.model.emplace(
        compiler::backends::compile(programs_[i], {.backend = config_.backend, .device = device_}));
    if (config_.prepare_model) config_.prepare_model(*bucket.model);
    for (const RowSpec& input : signature_.inputs) {
      runtime::Shape shape = input.row_shape;
      shape.insert(shape.begin(), bucket.rows);
      bucket.inputs.push_back(runtime::Tensor::empty(shape, input.dtype, device_));
    }
    // Note [Requests checked once]: the door checks these tensors here, once.
    bucket.bound = bucket.model->bind_inputs(bucket.inputs);
    buckets_.push_back(std::move(bucket));
  }
  programs_.clear();
  // Note [Asynchronous staging].
  const size_t largest = static_cast<size_t>(config_.buckets.back());
  runtime::DeviceContext& context = runtime::device_context(device_);
  runtime::Platform& platform = context.platform();
  for (size_t parity = 0; parity < 2; ++parity) {
    for (const RowSpec& input : signature_.inputs) {
      input_staging_[parity].emplace_back(device_, largest * input.row_bytes);
    }
    for (const RowSpec& output : signature_.outputs) {
      output_staging_[parity].emplace_back(device_, largest * output.row_bytes);
    }
    staging_done_[parity] = platform.create_event(false);
  }
  // Largest first: Note [One compiled model per bucket]. Zero rows are a
  // valid input for any model (index 0 for integer inputs).
  for (size_t i = buckets_.size(); i-- > 0;) {
    Bucket& bucket = buckets_[i];
    for (const runtime::Tensor& input : bucket.inputs) {
      platform.memset_async(input.data_ptr(), 0, input.nbytes(), context.current_stream());
    }
    for (int64_t call = 0; call < config_.warmup_calls; ++call) {
      compiler::TensorList outputs = (*bucket.model)(bucket.bound);
      // Reading back waits for the device and surfaces its errors now.
      if (!outputs.empty()) outputs.front().slice(0, 0, 1).to_host_bytes();
    }
  }
  warmup_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  tree_after_warmup_ = tree_stats();
  door_checks_counted_ = door_checks();
  refresh_snapshot();
}

void DeviceWorker::serve() {
  std::optional<InFlight> running;
  while (true) {
    // Note [Two batches in flight]: with a batch on the device, take the next
    // one only if it is due now; otherwise finish the running one first.
    std::vector<PendingRequest> next = running ? queue_.take_due_batch() : queue_.take_batch();
    if (!running && next.empty()) return;  // closed and empty
    std::optional<InFlight> launched;
    const Clock::time_point begin = Clock::now();
    Clock::time_point launched_at = begin, read_at = begin;
    if (!next.empty()) {
      // A strided output is read synchronously by read_back(), before the
      // next replay may overwrite it (Note [Asynchronous staging]).
      if (running && !running->strided_outputs.empty()) read_back(*running);
      launched = launch(std::move(next));
      launched_at = read_at = Clock::now();
    }
    if (running) {
      if (!running->read) read_back(*running);
      read_at = Clock::now();
      // Note [A batch due after the wait runs before the answers].
      if (!launched && config_.launch_after_wait) {
        std::vector<PendingRequest> due = queue_.take_due_batch();
        if (!due.empty()) {
          launched = launch(std::move(due));
          stats_.launched_after_wait();
          const Clock::time_point after = Clock::now();
          launched_at += after - read_at;  // counted as launch time, not answer time
          read_at = after;
        }
      }
      answer(*running);
      if (Clock::now() - snapshot_at_ >= config_.backend_snapshot_period) refresh_snapshot();
    }
    if (running) reaper_->hand(std::move(running->requests));
    running = std::move(launched);
    const Clock::time_point end = Clock::now();
    auto ns = [](Clock::duration span) {
      return static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(span).count());
    };
    stats_.worker_time(ns(launched_at - begin), ns(read_at - launched_at), ns(end - read_at));
  }
}

DeviceWorker::InFlight DeviceWorker::launch(std::vector<PendingRequest> batch) {
  InFlight run;
  run.dispatched = Clock::now();
  run.requests = std::move(batch);
  for (const PendingRequest& request : run.requests) run.rows += request.rows;
  run.bucket_rows = config_.bucket_for(run.rows);
  try {
    Bucket* bucket = nullptr;
    for (Bucket& candidate : buckets_) {
      if (candidate.rows == run.bucket_rows) bucket = &candidate;
    }
    GROVE_CHECK(bucket != nullptr, "no compiled bucket of ", run.bucket_rows, " rows on ",
                device_.str());
    if (config_.before_batch) config_.before_batch(run.rows, device_);
    // Note [Asynchronous staging]: copy in, run, copy back; no wait.
    runtime::DeviceContext& context = runtime::device_context(device_);
    runtime::Platform& platform = context.platform();
    const runtime::StreamHandle stream = context.current_stream();
    run.staging = next_staging_;
    next_staging_ ^= 1;
    uint64_t bytes_copied = 0, copies = 0;
    for (const PendingRequest& request : run.requests) {
      for (const HostRows& rows : request.request.inputs) bytes_copied += rows.bytes.size();
    }
    for (size_t k = 0; k < signature_.inputs.size(); ++k) copies += stage_input(run, k, *bucket);
    stats_.copied_to_device(bytes_copied, copies);
    compiler::TensorList outputs = (*bucket->model)(bucket->bound);
    GROVE_CHECK(outputs.size() == signature_.outputs.size(), "served model returned ",
                outputs.size(), " outputs; its signature has ", signature_.outputs.size());
    for (size_t o = 0; o < outputs.size(); ++o) {
      runtime::Tensor rows = outputs[o].slice(0, 0, run.rows);
      if (!rows.is_contiguous()) {
        run.strided_outputs.emplace_back(o, std::move(rows));  // read in read_back()
        continue;
      }
      platform.copy_async(output_staging_[run.staging][o].data(), rows.data_ptr(),
                          static_cast<size_t>(run.rows) * signature_.outputs[o].row_bytes,
                          runtime::CopyKind::kDeviceToHost, stream);
    }
    run.done = staging_done_[run.staging];
    platform.record_event(run.done, stream);
  } catch (...) {
    // The requests were checked at submit(), so this is the device's or the
    // model's failure: every request of the batch gets it.
    run.error = std::current_exception();
  }
  return run;
}

uint64_t DeviceWorker::copy_rows_apart(const InFlight& run, size_t k, uint8_t* device_rows,
                                       size_t bucket_bytes) {
  runtime::DeviceContext& context = runtime::device_context(device_);
  runtime::Platform& platform = context.platform();
  const runtime::StreamHandle stream = context.current_stream();
  uint64_t copies = 0;
  const uint8_t* run_source = nullptr;
  size_t run_at = 0, run_bytes = 0, offset = 0;
  auto copy_run = [&] {
    if (run_bytes == 0) return;
    platform.copy_async(device_rows + run_at, run_source, run_bytes,
                        runtime::CopyKind::kHostToDevice, stream);
    ++copies;
  };
  for (const PendingRequest& request : run.requests) {
    const RowBytes& bytes = request.request.inputs[k].bytes;
    if (bytes.empty()) continue;
    if (run_bytes == 0 || run_source + run_bytes != bytes.data()) {
      copy_run();
      run_source = bytes.data();
      run_at = offset;
      run_bytes = 0;
    }
    run_bytes += bytes.size();
    offset += bytes.size();
  }
  copy_run();
  if (bucket_bytes > offset) {
    platform.memset_async(device_rows + offset, 0, bucket_bytes - offset, stream);
  }
  return copies;
}

uint64_t DeviceWorker::stage_input(const InFlight& run, size_t k, const Bucket& bucket) {
  runtime::DeviceContext& context = runtime::device_context(device_);
  runtime::Platform& platform = context.platform();
  const runtime::StreamHandle stream = context.current_stream();
  auto* device_rows = static_cast<uint8_t*>(bucket.inputs[k].data_ptr());
  const size_t row_bytes = signature_.inputs[k].row_bytes;
  const size_t real_bytes = static_cast<size_t>(run.rows) * row_bytes;
  const size_t bucket_bytes = static_cast<size_t>(bucket.rows) * row_bytes;
  // Whether the requests' rows form one run in host memory (one copy as they are).
  const uint8_t* first = nullptr;
  size_t contiguous = 0;
  bool one_run = true;
  for (const PendingRequest& request : run.requests) {
    const RowBytes& bytes = request.request.inputs[k].bytes;
    if (bytes.empty()) continue;
    if (first == nullptr) first = bytes.data();
    if (first + contiguous != bytes.data()) one_run = false;
    contiguous += bytes.size();
  }
  if (!one_run && !config_.gather_inputs) {
    return copy_rows_apart(run, k, device_rows, bucket_bytes);
  }
  if (one_run) {
    uint64_t copies = 0;
    if (real_bytes > 0) {
      platform.copy_async(device_rows, first, real_bytes, runtime::CopyKind::kHostToDevice, stream);
      ++copies;
    }
    // Padded rows are zeros (Note [Shape buckets]); they never reach a response.
    if (bucket_bytes > real_bytes) {
      platform.memset_async(device_rows + real_bytes, 0, bucket_bytes - real_bytes, stream);
    }
    return copies;
  }
  // Note [One input copy per batch]: the staging of this parity is free (its
  // previous batch was read back before this launch).
  uint8_t* staging = input_staging_[run.staging][k].data();
  size_t at = 0;
  for (const PendingRequest& request : run.requests) {
    const RowBytes& bytes = request.request.inputs[k].bytes;
    std::memcpy(staging + at, bytes.data(), bytes.size());
    at += bytes.size();
  }
  std::memset(staging + at, 0, bucket_bytes - at);
  platform.copy_async(device_rows, staging, bucket_bytes, runtime::CopyKind::kHostToDevice, stream);
  return 1;
}

void DeviceWorker::read_back(InFlight& run) {
  // Note [Asynchronous staging]: the batch's rows are in its output staging
  // once its event has fired. After a failure part of the batch may still be
  // queued, so the whole stream is waited for before the stagings are reused.
  runtime::DeviceContext& context = runtime::device_context(device_);
  try {
    if (!run.error) {
      context.platform().synchronize_event(run.done);
    } else {
      context.platform().synchronize_stream(context.current_stream());
    }
    // A strided output (a view the model returns) is gathered synchronously;
    // it must not outlive the batch, since the next replay may overwrite it.
    for (const auto& [o, rows] : run.strided_outputs) {
      if (run.error) break;
      std::vector<uint8_t> bytes = rows.to_host_bytes();
      std::memcpy(output_staging_[run.staging][o].data(), bytes.data(), bytes.size());
    }
  } catch (...) {
    if (!run.error) run.error = std::current_exception();
  }
  run.strided_outputs.clear();
  run.read = true;
  run.completed = Clock::now();
}

void DeviceWorker::answer(InFlight& run) {
  // Counted before the reaper sets any future, so that whoever holds an
  // answer sees it in stats().
  stats_.batch(run.rows, run.bucket_rows);
  const uint64_t checks = door_checks();  // Note [Requests checked once]: none per batch
  stats_.door_checks(checks - door_checks_counted_);
  door_checks_counted_ = checks;
  // Note [Answers delivered off the worker]: kept with each request for the reaper.
  if (run.error) {
    stats_.failed(run.requests.size());
    for (PendingRequest& request : run.requests) request.error = run.error;
    return;
  }
  stats_.completed(run.requests.size());
  // Note [What a request is]: each response owns a copy of its rows.
  int64_t first_row = 0;
  for (PendingRequest& request : run.requests) {
    Response response;
    response.outputs.reserve(signature_.outputs.size());
    for (size_t o = 0; o < signature_.outputs.size(); ++o) {
      const RowSpec& spec = signature_.outputs[o];
      HostRows rows_out;
      rows_out.shape.reserve(spec.row_shape.size() + 1);  // one allocation
      rows_out.shape.push_back(request.rows);
      rows_out.shape.insert(rows_out.shape.end(), spec.row_shape.begin(), spec.row_shape.end());
      rows_out.dtype = spec.dtype;
      const uint8_t* begin =
          output_staging_[run.staging][o].data() + static_cast<size_t>(first_row) * spec.row_bytes;
      assign_row_bytes(rows_out.bytes, begin, static_cast<size_t>(request.rows) * spec.row_bytes);
      response.outputs.push_back(std::move(rows_out));
    }
    response.timing = {request.submitted, run.dispatched,  run.completed,
                       run.rows,          run.bucket_rows, device_};
    first_row += request.rows;
    request.response = std::move(response);
  }
}

void DeviceWorker::release_staging() {
  runtime::Platform& platform = runtime::device_context(device_).platform();
  for (size_t parity = 0; parity < 2; ++parity) {
    input_staging_[parity].clear();
    output_staging_[parity].clear();
    if (staging_done_[parity].impl != nullptr) platform.destroy_event(staging_done_[parity]);
    staging_done_[parity] = runtime::EventHandle{};
  }
}

uint64_t DeviceWorker::door_checks() const {
  uint64_t checks = 0;
  for (const Bucket& bucket : buckets_) {
    if (bucket.model) checks += bucket.model->input_checks();
  }
  return checks;
}

std::optional<runtime::GraphTreeStats> DeviceWorker::tree_stats() const {
  if (!uses_graphs(config_) || buckets_.empty() || !buckets_.front().model) return std::nullopt;
  // Every bucket's model runs in the same tree (this thread's, of device_).
  return buckets_.front().model->backend_stats().tree;
}

void DeviceWorker::refresh_snapshot() {
  WorkerSnapshot snapshot{.device = device_, .backend = config_.backend};
  try {
    snapshot.tree = tree_stats();
    if (!buckets_.empty() && buckets_.front().model) {
      snapshot.memory = buckets_.front().model->backend_memory();
    }
  } catch (const std::exception& error) {
    // Reporting must never fail a batch; the snapshot says what went wrong.
    snapshot.error = error.what();
  }
  snapshot_at_ = Clock::now();
  std::lock_guard<std::mutex> lock(snapshot_mutex_);
  snapshot_ = std::move(snapshot);
}

WorkerSnapshot DeviceWorker::backend_snapshot() const {
  std::lock_guard<std::mutex> lock(snapshot_mutex_);
  return snapshot_;
}

WorkerReport DeviceWorker::report() const {
  return WorkerReport{.device = device_,
                      .backend = config_.backend,
                      .buckets = config_.buckets,
                      .warmup_ms = warmup_ms_,
                      .tree_after_warmup = tree_after_warmup_,
                      .tree_at_exit = tree_at_exit_};
}

}  // namespace grove::serving
