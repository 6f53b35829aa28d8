#include "compiler/lowering/executor.h"

#include <iostream>
#include <new>
#include <sstream>

#include "compiler/codegen/kernel_compiler.h"
#include "compiler/ops/op_helpers.h"
#include "runtime/blas.h"
#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::compiler::lowering {
namespace {

using runtime::Tensor;

const Tensor& slot_tensor(const ScheduledProgram& program, const std::vector<Tensor>& env, int slot,
                          const Step& step) {
  const Tensor& tensor = env.at(static_cast<size_t>(slot));
  GROVE_CHECK(tensor.defined(), "lowered '", program.program->name(), "': step of node '",
              step.node_name, "' reads '", program.slots[static_cast<size_t>(slot)].name,
              "' before it was computed (a grove bug; please report it)");
  return tensor;
}

Tensor allocate_unnamed(const SlotInfo& info, runtime::Device device) {
  if (info.layout.is_contiguous()) return Tensor::empty(info.layout.shape, info.dtype, device);
  Tensor flat = Tensor::empty({runtime::shape_numel(info.layout.shape)}, info.dtype, device);
  return Tensor(flat.storage(), info.layout.shape, info.layout.strides, flat.offset(), info.dtype);
}

// The slot's tensor; a failure names the value, the node about to run and the
// bytes asked for (issue 24: "std::bad_alloc" and "extent out of range" named
// nothing). Test: GroveLimits.IntermediateTensorTooLargeForTheDeviceNamesTheNode.
Tensor allocate(const ScheduledProgram& program, const SlotInfo& info, const Step& step) {
  auto what = [&] {
    int64_t bytes = 0;
    bool overflows =
        __builtin_mul_overflow(runtime::shape_numel(info.layout.shape),
                               static_cast<int64_t>(runtime::dtype_size(info.dtype)), &bytes);
    return str_cat("model '", program.program->name(), "': value '", info.name, "' (",
                   runtime::dtype_name(info.dtype), runtime::shape_str(info.layout.shape), ", ",
                   overflows ? std::string("more than 2^63") : std::to_string(bytes),
                   " bytes) of node '", step.node_name, "'");
  };
  try {
    return allocate_unnamed(info, program.device);
  } catch (const OutOfMemoryError& error) {
    throw OutOfMemoryError(
        str_cat(what(), " does not fit on ", program.device.str(), ": ", error.what()));
  } catch (const ShapeError& error) {
    throw ShapeError(str_cat(what(), ": ", error.what()));
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(str_cat(what(), " does not fit in host memory"));
  }
}

void* advance(void* pointer, int64_t elements, runtime::DType dtype) {
  return static_cast<uint8_t*>(pointer) +
         elements * static_cast<int64_t>(runtime::dtype_size(dtype));
}

// Each call runs on the device's BLAS (Platform::blas()): cuBLAS on cuda, the
// host GEMM recorded as a host kernel on sim and cpu.
void run_gemm(const ScheduledProgram& program, const Step& step, std::vector<Tensor>& env,
              runtime::BlasSupport& blas, runtime::StreamHandle stream) {
  const GemmLaunch& launch = step.gemm;
  void* a = slot_tensor(program, env, launch.a_slot, step).data_ptr();
  void* b = slot_tensor(program, env, launch.b_slot, step).data_ptr();
  void* c = slot_tensor(program, env, launch.c_slot, step).data_ptr();
  runtime::GemmArgs args = launch.args;
  if (launch.bias_slot >= 0)
    args.bias = slot_tensor(program, env, launch.bias_slot, step).data_ptr();
  if (launch.aux_slot >= 0) args.aux = slot_tensor(program, env, launch.aux_slot, step).data_ptr();
  if (launch.bias_grad_slot >= 0)
    args.bias_grad = slot_tensor(program, env, launch.bias_grad_slot, step).data_ptr();
  for (const GemmCall& call : launch.calls) {
    args.a = advance(a, call.a_offset, args.dtype);
    args.b = advance(b, call.b_offset, args.dtype);
    args.c = advance(c, call.c_offset, args.dtype);
    blas.gemm_row_major(stream, args);
  }
}

std::string print_text(const std::string& message, const Tensor& tensor) {
  std::ostringstream text;
  text << message << ": " << runtime::dtype_name(tensor.dtype()) << ir::shape_text(tensor.shape())
       << " [";
  std::vector<double> values = tensor.to_doubles();
  for (size_t i = 0; i < values.size(); ++i) text << (i ? ", " : "") << values[i];
  text << "]";
  return text.str();
}

Tensor nonzero(const Tensor& x) {
  std::vector<double> values = x.to_doubles();  // synchronizes the current stream
  const Shape& shape = x.shape();
  std::vector<int64_t> indices;
  std::vector<int64_t> index(shape.size(), 0);
  int64_t count = 0;
  for (double value : values) {
    if (value != 0) {
      ++count;
      indices.insert(indices.end(), index.begin(), index.end());
    }
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  Shape result_shape = {count, static_cast<int64_t>(shape.size())};
  if (indices.empty()) return Tensor::empty(result_shape, runtime::DType::kI64, x.device());
  return Tensor::from_vector(indices, result_shape, x.device());
}

Shape broadcast(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& shape : shapes) rank = std::max(rank, shape.size());
  Shape result(rank, 1);
  for (const Shape& shape : shapes) {
    size_t lead = rank - shape.size();
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] != 1) result[lead + d] = shape[d];
    }
  }
  return result;
}

// An elementwise node over operands whose shapes are known only now.
Tensor run_dynamic(const ScheduledProgram& program, const Step& step, std::vector<Tensor>& env) {
  const LoweringNode& node = program.graph->node(step.graph_node);
  std::vector<Tensor> operands;
  std::vector<Shape> shapes;
  for (int slot : step.sources) {
    operands.push_back(slot_tensor(program, env, slot, step));
    shapes.push_back(operands.back().shape());
  }
  Shape shape = broadcast(shapes);
  ops::OpContext context = node.context;
  codegen::KernelSpec spec;
  spec.name = node.op;
  spec.iteration_shape = shape;
  codegen::KernelBuilder emitter(spec);
  std::vector<int> exprs;
  for (size_t k = 0; k < operands.size(); ++k) {
    context.operand_types[k].shape = operands[k].shape();
    AccessMap map = broadcast_map(operands[k].shape(), shape);
    std::optional<Shape> strides =
        iteration_strides(operands[k].shape(), operands[k].strides(), map, shape.size());
    spec.inputs.push_back(codegen::BufferSpec{operands[k].dtype(), *strides});
    codegen::Expr load;
    load.op = codegen::ExprOp::kLoad;
    load.dtype = ops::compute_dtype(operands[k].dtype());
    load.input = static_cast<int>(k);
    exprs.push_back(emitter.add(load));
  }
  const runtime::DType dtype = program.slots[static_cast<size_t>(step.result)].dtype;
  int result = node.def->elementwise_expr(emitter, exprs, context).at(0);
  spec.outputs.push_back(
      codegen::OutputSpec{dtype, result, false, runtime::contiguous_strides(shape)});
  codegen::CompiledKernel kernel = codegen::compile_kernel(spec, program.device);
  Tensor output = Tensor::empty(shape, dtype, program.device);
  if (output.numel() > 0) codegen::launch(kernel, operands, {output});
  return output;
}

}  // namespace

void run_steps(const ScheduledProgram& program, size_t first, size_t end, std::vector<Tensor>& env,
               const ExecutorOptions& options) {
  runtime::DeviceContext& context = runtime::device_context(program.device);
  const runtime::StreamHandle stream = context.current_stream();
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  for (size_t i = first; i < end; ++i) {
    const Step& step = program.steps[i];
    for (int slot : step.allocate) {
      env[static_cast<size_t>(slot)] =
          allocate(program, program.slots[static_cast<size_t>(slot)], step);
    }
    switch (step.kind) {
      case StepKind::kKernel: {
        const KernelLaunch& launch = step.kernel;
        if (launch.spec.element_count() == 0) break;
        inputs.clear();
        outputs.clear();
        for (int slot : launch.input_slots) {
          inputs.push_back(slot_tensor(program, env, slot, step).data_ptr());
        }
        for (size_t o = 0; o < launch.output_slots.size(); ++o) {
          const Tensor& tensor = slot_tensor(program, env, launch.output_slots[o], step);
          outputs.push_back(advance(tensor.data_ptr(), launch.output_offsets[o], tensor.dtype()));
        }
        codegen::launch(launch.kernel, inputs, outputs, {}, stream);
        break;
      }
      case StepKind::kGemm:
        run_gemm(program, step, env, context.platform().blas(), stream);
        break;
      case StepKind::kView: {
        const Tensor& source = slot_tensor(program, env, step.source, step);
        const SlotInfo& from = program.slots[static_cast<size_t>(step.source)];
        const SlotInfo& to = program.slots[static_cast<size_t>(step.result)];
        int64_t offset = source.offset() - from.layout.offset + to.layout.offset;
        env[static_cast<size_t>(step.result)] =
            Tensor(source.storage(), to.layout.shape, to.layout.strides, offset, to.dtype);
        break;
      }
      case StepKind::kAlias:
        if (step.result >= 0) {
          env[static_cast<size_t>(step.result)] = slot_tensor(program, env, step.source, step);
        }
        break;
      case StepKind::kNonzero:
        env[static_cast<size_t>(step.result)] =
            nonzero(slot_tensor(program, env, step.source, step));
        break;
      case StepKind::kPrint: {
        const Tensor& source = slot_tensor(program, env, step.source, step);
        std::string text = print_text(step.message, source);
        if (options.print_sink) {
          options.print_sink(text);
        } else {
          std::cerr << text << std::endl;
        }
        env[static_cast<size_t>(step.result)] = source;
        break;
      }
      case StepKind::kDynamicElementwise:
        env[static_cast<size_t>(step.result)] = run_dynamic(program, step, env);
        break;
      case StepKind::kLaunch: {
        // OpDef::launch works in place (result r is operand r), or into the
        // fresh results allocated above, passed after the operands (Note
        // [Launch hooks with fresh results], scheduler.cc).
        const LoweringNode& node = program.graph->node(step.graph_node);
        std::vector<Tensor> operands;
        for (int slot : step.sources) operands.push_back(slot_tensor(program, env, slot, step));
        const bool fresh = !step.allocate.empty();
        if (fresh) {
          for (int slot : step.results) operands.push_back(env[static_cast<size_t>(slot)]);
        }
        node.def->launch(node.context, operands, stream);
        if (!fresh) {
          for (size_t r = 0; r < step.results.size(); ++r) {
            env[static_cast<size_t>(step.results[r])] = operands[r];
          }
        }
        break;
      }
    }
    for (int slot : step.release) env[static_cast<size_t>(slot)] = Tensor();
  }
}

}  // namespace grove::compiler::lowering
