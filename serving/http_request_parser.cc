#include "serving/http_request_parser.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

#include "runtime/error.h"

namespace grove::serving {

namespace http = boost::beast::http;

RequestParser::RequestParser(const RequestLimits& limits) : limits_(limits) {
  body_limit(limits_.max_body_bytes);
  header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
}

void RequestParser::on_request_impl(http::verb, boost::beast::string_view method_text,
                                    boost::beast::string_view target, int version,
                                    boost::beast::error_code&) {
  request_.version = version;
  request_.method.assign(method_text.data(), method_text.size());
  request_.target.assign(target.data(), target.size());
  request_.path = percent_decode(request_.target.substr(0, request_.target.find('?')));
}

void RequestParser::on_field_impl(http::field name, boost::beast::string_view name_text,
                                  boost::beast::string_view value,
                                  boost::beast::error_code& error) {
  if (++fields_ > limits_.max_headers) {
    too_many_fields_ = true;
    error = http::error::header_limit;
    return;
  }
  if (name == http::field::expect) {
    expects_continue_ = boost::beast::iequals(value, "100-continue");
  } else if (boost::beast::iequals(name_text, "Inference-Header-Content-Length")) {
    request_.inference_header_length = std::string(value.data(), value.size());
  }
}

void RequestParser::on_header_impl(boost::beast::error_code&) {
  request_.keep_alive = keep_alive();
}

void RequestParser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                                      boost::beast::error_code&) {
  // Within max_body_bytes: the base parser refused a larger one already.
  if (content_length) request_.body.reserve(static_cast<size_t>(*content_length));
}

std::size_t RequestParser::on_body_impl(boost::beast::string_view body, boost::beast::error_code&) {
  request_.body.append(body.data(), body.size());
  return body.size();
}

std::size_t RequestParser::on_chunk_body_impl(std::uint64_t, boost::beast::string_view body,
                                              boost::beast::error_code&) {
  request_.body.append(body.data(), body.size());
  return body.size();
}

HttpResponse RequestParser::refusal(const boost::beast::error_code& error) const {
  // Note [Request limits].
  if (error == http::error::body_limit) {
    return error_response(413, str_cat("request body over the limit of ", limits_.max_body_bytes,
                                       " bytes (--max-body-bytes)"));
  }
  if (too_many_fields_) {
    return error_response(
        431, str_cat("more than ", limits_.max_headers, " header fields (--max-header-fields)"));
  }
  if (error == http::error::header_limit || error == http::error::buffer_overflow) {
    return error_response(431, str_cat("request line and header fields over the limit of ",
                                       limits_.max_header_bytes, " bytes (--max-header-bytes)"));
  }
  return error_response(400, str_cat("malformed HTTP request: ", error.message()));
}

}  // namespace grove::serving
