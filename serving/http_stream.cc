#include "serving/http_stream.h"

#include <cstdio>

namespace grove::serving {

void HttpStream::notify(std::unique_lock<std::mutex>& lock) {
  std::function<void()> on_update = on_update_;
  lock.unlock();
  if (on_update) on_update();
}

void HttpStream::write(std::string piece) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (ended_ || cancelled_ || mode_ != Mode::kChunked || piece.empty()) return;
  pending_ += piece;
  notify(lock);
}

void HttpStream::close() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (ended_ || cancelled_ || mode_ != Mode::kChunked) return;
  ended_ = true;
  notify(lock);
}

void HttpStream::answer(HttpResponse response) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (ended_ || cancelled_ || mode_ != Mode::kWhole) return;
  ended_ = true;
  response_ = std::move(response);
  notify(lock);
}

void HttpStream::on_cancel(std::function<void()> on_cancel) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (cancelled_) {
    lock.unlock();
    on_cancel();
    return;
  }
  on_cancel_ = std::move(on_cancel);
}

bool HttpStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

void HttpStream::watch(std::function<void()> on_update) {
  std::unique_lock<std::mutex> lock(mutex_);
  on_update_ = std::move(on_update);
  if (!pending_.empty() || ended_) notify(lock);
}

HttpStream::Update HttpStream::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  Update update;
  update.bytes.swap(pending_);
  if (ended_ && !taken_end_) {
    update.ended = true;
    taken_end_ = true;
    update.response = std::move(response_);
    on_update_ = nullptr;  // the watcher holds the connection: let it go
    on_cancel_ = nullptr;
  }
  return update;
}

void HttpStream::cancel() {
  std::function<void()> on_cancel;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cancelled_ || taken_end_) return;
    cancelled_ = true;
    on_cancel.swap(on_cancel_);
    on_update_ = nullptr;
  }
  if (on_cancel) on_cancel();
}

std::string chunked_response_head(const HttpResponse& response, bool keep_alive, bool chunked) {
  std::string head =
      "HTTP/1.1 " + std::to_string(response.status) + " " + status_reason(response.status) +
      "\r\nContent-Type: " + response.content_type +
      (chunked ? "\r\nTransfer-Encoding: chunked" : "") +
      "\r\nCache-Control: no-cache\r\nConnection: " + (keep_alive ? "keep-alive" : "close") +
      "\r\n";
  for (const auto& [name, value] : response.headers)
    head += std::string(name) + ": " + value + "\r\n";
  head += "\r\n";
  return head;
}

std::string http_chunk(const std::string& bytes) {
  if (bytes.empty()) return "";
  char size[24];
  std::snprintf(size, sizeof(size), "%zx\r\n", bytes.size());
  return size + bytes + "\r\n";
}

}  // namespace grove::serving
