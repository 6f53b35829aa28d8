// ModelSignature is what one row of a served model looks like: per `input`
// and per output, its name, the shape of one row and its dtype. The server
// derives it from each bucket's Program (which must agree) and checks every
// request against it once (Note [Requests checked once]).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir/program.h"
#include "serving/request.h"
#include "serving/sharded_counter.h"

namespace grove::serving {

class InputChecks;  // serving/kserve_protocol.h
struct ModelSignature;

// Note [Requests checked once]
// A request's input count, dtypes, row shapes, row counts and byte sizes are
// checked once, where it enters the server: by the protocol front that read
// it (InputChecks, while it reads the request's encoding, then
// InputChecks::checked) or, for a Request built in C++, by Server::submit
// (ModelSignature::check_request). Both hand back a CheckedRequest, which only
// they can build, and the server queues only those: Server::submit_then of a
// CheckedRequest and the worker rely on it and check nothing again: the
// worker's bucket inputs were bound once at warm-up (CompiledModel::
// bind_inputs, Note [One input check per call]), so the door checks no batch.
// Each check is counted (ModelSignature::request_checks, ServerStats::
// request_checks; the door's, ServerStats::door_checks): one per request.
// Tests: ServerTest.EachRequestIsCheckedOnce, KserveProtocol.AParsedRequestIsCheckedOnce,
// ServerTest.ACheckedRequestIsServedAndAnUncheckedOneRefused,
// ServerTest.ABadRequestFailsAloneAtSubmitWhileOthersAreServed (C++ requests),
// KserveProtocol.AParsedRequestIsCheckedWithItsRows and the fronts' refusals
// (KserveProtocol.*, KserveGrpcProtocol.*, KserveRoutes.*).
class CheckedRequest {
 public:
  // Holds no rows; Server refuses it (only a check gives a request rows).
  CheckedRequest() = default;
  const std::vector<HostRows>& inputs() const { return request_.inputs; }
  int64_t rows() const { return rows_; }
  // The request, for the queue (this is left empty).
  Request release() && { return std::move(request_); }

 private:
  friend class InputChecks;
  friend struct ModelSignature;
  CheckedRequest(Request request, int64_t rows) : request_(std::move(request)), rows_(rows) {}

  Request request_;
  int64_t rows_ = 0;
};

struct RowSpec {
  std::string name;
  runtime::Shape row_shape;  // the shape without dim 0
  runtime::DType dtype = runtime::DType::kF32;
  size_t row_bytes = 0;
};

struct ModelSignature {
  std::vector<RowSpec> inputs;   // the program's `input` values, call order
  std::vector<RowSpec> outputs;  // the program's outputs

  // The signature of `program` built for `batch` rows. Throws ConfigError when
  // the program has no `input`, or an input or output is not [batch, ...].
  static ModelSignature of(const compiler::ir::Program& program, int64_t batch);
  // Throws ConfigError naming the first difference (programs of two buckets
  // must differ only in the batch).
  void check_matches(const ModelSignature& other, const std::string& what) const;
  // The request, checked (Note [Requests checked once]). Throws ShapeError or
  // DTypeError naming the input when the request does not fit (count, dtype,
  // row shape, byte size, rows outside [1, max_batch], inputs with different
  // row counts).
  CheckedRequest check_request(Request request, int64_t max_batch) const;

  // Requests checked against this signature object: each check_request() and
  // each InputChecks::checked() that handed one back. A copy counts afresh.
  uint64_t request_checks() const { return checks_.value.load(); }
  void count_request_check() const { checks_.value.add(); }  // Note [Counters per thread]

 private:
  struct CheckCounter {
    ShardedCounter value;
    CheckCounter() = default;
    CheckCounter(const CheckCounter&) {}
    CheckCounter& operator=(const CheckCounter&) { return *this; }
  };
  mutable CheckCounter checks_;
};

}  // namespace grove::serving
