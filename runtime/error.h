// grove's error types. Every check that can fail on user input throws one of
// these with a message naming the object, what was expected, what was found,
// and what to do about it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace grove {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A tensor's shape does not fit the operation.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A dtype does not fit the operation.
class DTypeError : public Error {
 public:
  using Error::Error;
};

// Wrong device, no device, or a device call that failed.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// Work that stream capture forbids (a sync, a host read, an allocation outside
// the capture pool). The capture is invalidated; the stream stays usable.
class CaptureViolation : public Error {
 public:
  using Error::Error;
};

// Data access through a tensor whose memory the tree manager has reclaimed.
class StaleTensorError : public Error {
 public:
  using Error::Error;
};

// A JSON model that does not follow grove's model format.
class ModelFormatError : public Error {
 public:
  using Error::Error;
};

// The caching allocator could not satisfy a request.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// A configuration value that is out of range or malformed.
class ConfigError : public Error {
 public:
  using Error::Error;
};

namespace detail {

inline void append_all(std::ostringstream&) {}

template <typename First, typename... Rest>
void append_all(std::ostringstream& stream, const First& first, const Rest&... rest) {
  stream << first;
  append_all(stream, rest...);
}

template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream stream;
  append_all(stream, parts...);
  return stream.str();
}

}  // namespace detail

// Builds a message from any streamable parts: str_cat("expected ", n, " inputs").
template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  return detail::concat(parts...);
}

}  // namespace grove

// GROVE_CHECK(cond, parts...) throws grove::Error with the concatenated parts.
// GROVE_CHECK_AS(ErrorType, cond, parts...) throws the given subclass.
#define GROVE_CHECK_AS(ErrorType, cond, ...)          \
  do {                                                \
    if (!(cond)) [[unlikely]] {                       \
      throw ErrorType(::grove::str_cat(__VA_ARGS__)); \
    }                                                 \
  } while (false)

#define GROVE_CHECK(cond, ...) GROVE_CHECK_AS(::grove::Error, cond, __VA_ARGS__)
