#include "serving/http_message.h"

#include <charconv>

#include "serving/kserve_protocol.h"

namespace grove::serving {

HttpResponse error_response(int status, const std::string& message) {
  HttpResponse response;
  response.status = status;
  response.body = error_json(message);  // Note [Refusals are valid JSON]
  return response;
}

HttpResponse json_response(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

const char* status_reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 417:
      return "Expectation Failed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

// Note [A response head without allocations]
// The head of every answer was built by eleven string concatenations, five
// allocations per answer on the loop (perf's malloc probe, serve_http on
// sim). A connection now writes it into the string it keeps for its heads
// (HttpConnection::head_), whose capacity outlives the answer, numbers by
// std::to_chars: none once the string has grown. Test: HttpMessage.ResponseHeadHasEveryField
// (tests/serving/http_stream_test.cc), every HTTP test.
void write_response_head(std::string& head, const HttpResponse& response, bool keep_alive) {
  char number[24];
  auto append_number = [&](size_t value) {
    head.append(number, static_cast<size_t>(
                            std::to_chars(number, number + sizeof(number), value).ptr - number));
  };
  head.clear();
  head += "HTTP/1.1 ";
  append_number(static_cast<size_t>(response.status));
  head += ' ';
  head += status_reason(response.status);
  head += "\r\nContent-Type: ";
  head += response.content_type;
  head += "\r\nContent-Length: ";
  append_number(response.body.size());
  head += "\r\nAccept-Ranges: none\r\nConnection: ";
  head += keep_alive ? "keep-alive" : "close";
  head += "\r\n";
  for (const auto& [name, value] : response.headers) {
    head += name;
    head += ": ";
    head += value;
    head += "\r\n";
  }
  head += "\r\n";
}

std::string response_head(const HttpResponse& response, bool keep_alive) {
  std::string head;
  write_response_head(head, response, keep_alive);
  return head;
}

std::string percent_decode(const std::string& path) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 2 < path.size() && hex(path[i + 1]) >= 0 && hex(path[i + 2]) >= 0) {
      out += static_cast<char>(hex(path[i + 1]) * 16 + hex(path[i + 2]));
      i += 2;
    } else {
      out += path[i];
    }
  }
  return out;
}

}  // namespace grove::serving
