// RequestParser reads one HTTP/1.1 request (Beast's parser: request line,
// fields, Content-Length or chunked body) into an HttpRequest, within the
// limits of Note [Request limits], and turns a request it refuses into the
// answer to write before the connection closes.
#pragma once

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <cstddef>

#include "serving/http_message.h"

namespace grove::serving {

struct RequestLimits {
  size_t max_body_bytes = size_t{16} << 20;
  size_t max_header_bytes = size_t{16} << 10;  // request line and fields
  size_t max_headers = 64;                     // fields
};

// Note [Request limits]
// A request is refused as early as its bytes allow, so that a client pays
// for what it sends and no more: a Content-Length over max_body_bytes gets
// 413 once the header is read, before any of the body is; a chunked body gets
// 413 at the first chunk header that would pass max_body_bytes, and nothing
// past the limit is kept; a header over max_header_bytes or with more than
// max_headers fields gets 431. Only the fields the routes use are kept, so a
// request's memory is its body and a few strings. Each refusal closes the
// connection (the stream cannot be resynced), after draining what the client
// still sends, bounded, so that it reads its answer. Tests (tests/serving/
// http_abuse_test.py): test_over_limit_content_length_is_refused_before_the_body,
// test_chunked_body_over_the_limit_is_413, test_header_flood_is_431.
class RequestParser : public boost::beast::http::basic_parser<true> {
 public:
  explicit RequestParser(const RequestLimits& limits);

  HttpRequest& request() { return request_; }
  // The client sent `Expect: 100-continue` (curl does for large bodies).
  bool expects_continue() const { return expects_continue_; }
  // The answer to a request that failed to parse with `error`: 413, 431 or
  // 400, naming the limit or what was malformed.
  HttpResponse refusal(const boost::beast::error_code& error) const;

 private:
  void on_request_impl(boost::beast::http::verb method, boost::beast::string_view method_text,
                       boost::beast::string_view target, int version,
                       boost::beast::error_code& error) override;
  void on_response_impl(int, boost::beast::string_view, int, boost::beast::error_code&) override {}
  void on_field_impl(boost::beast::http::field name, boost::beast::string_view name_text,
                     boost::beast::string_view value, boost::beast::error_code& error) override;
  void on_header_impl(boost::beast::error_code& error) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         boost::beast::error_code& error) override;
  std::size_t on_body_impl(boost::beast::string_view body,
                           boost::beast::error_code& error) override;
  void on_chunk_header_impl(std::uint64_t, boost::beast::string_view,
                            boost::beast::error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t remain, boost::beast::string_view body,
                                 boost::beast::error_code& error) override;
  void on_finish_impl(boost::beast::error_code&) override {}

  RequestLimits limits_;
  HttpRequest request_;
  size_t fields_ = 0;
  bool too_many_fields_ = false;
  bool expects_continue_ = false;
};

}  // namespace grove::serving
