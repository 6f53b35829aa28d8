// ModelSignature is what one row of a served model looks like: per `input`
// and per output, its name, the shape of one row and its dtype. The server
// derives it from each bucket's Program (which must agree) and checks every
// request against it at submit().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir/program.h"
#include "serving/request.h"

namespace grove::serving {

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
  // The request's row count. Throws ShapeError or DTypeError naming the input
  // when the request does not fit (count, dtype, row shape, byte size,
  // rows outside [1, max_batch], inputs with different row counts).
  int64_t check_request(const Request& request, int64_t max_batch) const;
};

}  // namespace grove::serving
