/* grove's C API (libgrove.so): compile a grove JSON program and run it on
 * tensors the caller owns, with nothing copied in or out.
 *
 *   grove_model* model;
 *   if (grove_compile(program_json, "{\"backend\": \"cudagraphs\"}", NULL, 0, &model) != GROVE_OK)
 *     fprintf(stderr, "%s\n", grove_last_error());
 *   grove_tensor_desc x = {data, GROVE_F32, GROVE_DEVICE_CUDA, 0, 2, shape, NULL, NULL, NULL};
 *   grove_tensor* y;
 *   size_t count;
 *   grove_model_run(model, &x, 1, stream, &y, 1, &count);
 *   ... grove_tensor_to_dlpack(y, &managed) or grove_tensor_data(y, &pointer) ...
 *   grove_tensor_destroy(y);
 *   grove_model_destroy(model);
 *
 * Every call returns a grove_status; on failure grove_last_error() holds a
 * message (thread-local, valid until the thread's next failing call) naming
 * what was wrong. No C++ exception ever leaves this library. Handles are
 * opaque and each kind has its destroy call; destroying NULL does nothing.
 * One model may be called from many threads at once (each thread records and
 * replays into trees of its own); grove_model_destroy waits for the calls in
 * flight on other threads and refuses calls that start while it waits (Note
 * [Destroying a model in use], capi/grove.cc). A model whose program draws
 * random numbers without explicit seeds keeps one generator state on the
 * device: two threads calling it at once may draw the same numbers.
 * The layout of the structs below is part of the ABI (python/grove mirrors it
 * with ctypes): fields are only ever appended.
 */
#ifndef GROVE_CAPI_GROVE_H_
#define GROVE_CAPI_GROVE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: grove_invocation_begin / _end; 3: grove_group_*; 4: grove_model_run_keeping and the
 * other kept-value calls; 5: grove_optimizer_program; 6: grove_model_run_dlpack_invocation;
 * 7: grove_model_run_handout, grove_dlpack_unowned, grove_dlpack_release;
 * 8: grove_model_time_runs_split */
#define GROVE_CAPI_VERSION 8

typedef enum grove_status {
  GROVE_OK = 0,
  GROVE_ERROR_INVALID_ARGUMENT = 1, /* a null pointer, a count, an unknown name */
  GROVE_ERROR_SHAPE = 2,
  GROVE_ERROR_DTYPE = 3,
  GROVE_ERROR_DEVICE = 4,
  GROVE_ERROR_STALE = 5, /* a tensor a later replay overwrote or a finished step freed */
  GROVE_ERROR_MODEL_FORMAT = 6,
  GROVE_ERROR_OUT_OF_MEMORY = 7,
  GROVE_ERROR_CAPACITY = 8, /* an output array too small; *count says how many are needed */
  GROVE_ERROR_INTERNAL = 9  /* any other grove::Error or C++ exception */
} grove_status;

/* Values match grove::runtime::DType. */
typedef enum grove_dtype {
  GROVE_F32 = 0,
  GROVE_F16 = 1,
  GROVE_BF16 = 2,
  GROVE_I32 = 3,
  GROVE_I64 = 4,
  GROVE_BOOL = 5,
  GROVE_F64 = 6
} grove_dtype;

/* Values match grove::runtime::DeviceType. sim memory is host memory. */
typedef enum grove_device_type {
  GROVE_DEVICE_CPU = 0,
  GROVE_DEVICE_SIM = 1,
  GROVE_DEVICE_CUDA = 2
} grove_device_type;

/* A tensor the caller owns. grove views `data` without copying; when it no
 * longer needs the memory (the last grove view is gone) it calls
 * release(release_context) exactly once, on success or failure of the call
 * that was handed the description. NULL release: the memory is borrowed, and
 * the caller keeps it alive for the whole call or, for bound params, the
 * model's life; an output of a run that would still view a borrowed input
 * after the call (a view of it) gets a copy of it instead (Note [Borrowed
 * inputs], capi/grove.cc). */
typedef struct grove_tensor_desc {
  void* data;
  int32_t dtype;       /* grove_dtype */
  int32_t device_type; /* grove_device_type */
  int32_t device_index;
  int32_t rank;           /* 0..8 */
  const int64_t* shape;   /* rank entries (may be NULL when rank is 0) */
  const int64_t* strides; /* rank entries in elements, or NULL for contiguous */
  void (*release)(void* release_context);
  void* release_context;
} grove_tensor_desc;

/* A param or buffer bound to caller memory at compile time: the model reads
 * (and, for buffers updated in place, writes) that memory on every call and
 * never copies it; the tree of CUDA graphs checks its address before replay. */
typedef struct grove_state_binding {
  const char* name;
  grove_tensor_desc tensor;
} grove_state_binding;

typedef struct grove_model grove_model;
typedef struct grove_tensor grove_tensor;

/* The message of the calling thread's last failing call ("" if none). */
const char* grove_last_error(void);
int grove_capi_version(void);

/* Compiles `program_json` (grove's JSON model format, a NUL-terminated string:
 * text after an embedded NUL is never read; python/grove refuses such text) with `options_json`
 * (NULL or "{}" for defaults): {"backend": "eager" | "cudagraphs",
 * "device": "sim:0" | "cuda:0" | ..., "dims": {"batch": 4},
 * "stage": "inference" | "forward" | "backward" | "optimizer",
 * "never_capture": bool, "skip_warmup": bool,
 * "gradient_all_reduce": {"outputs": [positions], "op": "mean" | "sum",
 * "bucket_bytes": int, "overlap": bool}, "small_m_gemm": "off" | "on" | "auto",
 * "gemm_search": bool, "sibling_gemms": bool}. "gemm_search": true makes the model's library
 * GEMMs on cuda take the fastest of cuBLASLt's candidates, timed once per process and shape, as
 * GROVE_GEMM_SEARCH=1 does for every model. "sibling_gemms": true makes GEMMs of the model that
 * share an operand one GEMM over the concatenated others (q/k/v and their gradients), as
 * GROVE_FUSE_SIBLING_GEMMS=1 does for every model.
 * "small_m_gemm" picks grove's small-M GEMM kernel for this model alone, as
 * GROVE_SMALL_M_GEMM does for the process (which decides when the option is
 * absent or ""; another value fails with GROVE_ERROR_INVALID_ARGUMENT). "gradient_all_reduce" (a
 * backward of data-parallel training, after grove_group_join) reduces the listed outputs (all when
 * absent) over the device's group inside the program, in buckets (default 25 MiB, op "mean",
 * overlap false: the door's gradients are plain outputs, not persistent buffers). "stage" says
 * which part of a training step the program is (default "inference"): with "cudagraphs", a forward
 * holds the tree's generation open until its backward runs, so the backward reads the activations
 * the forward saved in the tree's pool. Params and buffers named in `bindings` view the caller's
 * memory (which must be contiguous and match the declared type); the others start from their
 * initializers. */
grove_status grove_compile(const char* program_json, const char* options_json,
                           const grove_state_binding* bindings, size_t binding_count,
                           grove_model** model);
/* The optimizer step program grove's Trainer runs (training/optimizer.h),
 * as grove JSON model text for grove_compile with "stage": "optimizer", written to
 * *program_json (a new string freed with grove_string_free). `request_json`:
 * {"optimizer": "sgd_momentum" | "adamw",
 *  "params": [{"name": "w", "shape": [4, 8], "dtype": "f32"}, ...],
 *  "gradients": "buffers" (default) | "inputs" | "flat", "name": "step"}.
 * The program updates each param in place (PyTorch's SGD with momentum, or
 * AdamW) and has no outputs. Its inputs, in call order, are the f32 scalar
 * hyper-parameters (SGD: lr, momentum, weight_decay; AdamW: lr, beta1, beta2,
 * eps, weight_decay, step, 1-based), then with "gradients": "inputs" one
 * gradient per param named "grad.<param>", with "flat" one input "grads"
 * holding every param's gradient in order (the params share one dtype, else
 * GROVE_ERROR_DTYPE), sliced per param inside the program (else the gradients
 * are buffers the caller binds); the state lives in buffers "<param>.momentum" or "<param>.exp_avg"
 * and "<param>.exp_avg_sq". A param that is not floating fails with
 * GROVE_ERROR_DTYPE. */
grove_status grove_optimizer_program(const char* request_json, char** program_json);

/* Waits until no call of `model` is in flight on another thread, then frees
 * it. Never call it from inside a call of the same model (a release callback):
 * it would wait for itself. */
void grove_model_destroy(grove_model* model);

grove_status grove_model_input_count(const grove_model* model, size_t* count);
/* The name of input `index`; the pointer lives as long as the model. */
grove_status grove_model_input_name(const grove_model* model, size_t index, const char** name);
grove_status grove_model_output_count(const grove_model* model, size_t* count);

/* Runs the model on `inputs` (the program's inputs in order). On cuda the
 * work is ordered on `stream` (a cudaStream_t; NULL is the legacy default
 * stream, PyTorch's default: the call then runs on a stream of grove's own,
 * ordered after and before the legacy stream's work by events, since nothing
 * can be captured on the legacy stream); on sim and cpu `stream` must be NULL. Writes up
 * to `capacity` new output handles into `outputs` and their number into
 * `*count`. Every descriptor's release runs exactly once whatever happens. */
grove_status grove_model_run(grove_model* model, const grove_tensor_desc* inputs,
                             size_t input_count, void* stream, grove_tensor** outputs,
                             size_t capacity, size_t* count);

/* Runs the model `calls` times on `inputs` from C++ (outputs dropped, the
 * stream synchronized at the end) and writes the mean wall time of one call
 * in seconds: what the same call costs without the caller's language, for
 * benchmarks that measure their own side's overhead. The inputs are viewed
 * for the whole loop; their release runs once, after it. */
grove_status grove_model_time_runs(grove_model* model, const grove_tensor_desc* inputs,
                                   size_t input_count, void* stream, int64_t calls,
                                   double* seconds_per_call);

/* grove_model_time_runs split (Note [The launch clock], runtime/launch_clock.h):
 * per call, the seconds to the call's return (`host_seconds`), the seconds of
 * it inside the platform's graph launches (`launch_seconds`) and the wall
 * time to the stream's synchronization (`wall_seconds`). With `idle` not 0
 * the stream is synchronized (untimed) before each call, so every launch
 * meets an idle device. */
grove_status grove_model_time_runs_split(grove_model* model, const grove_tensor_desc* inputs,
                                         size_t input_count, void* stream, int64_t calls, int idle,
                                         double* host_seconds, double* launch_seconds,
                                         double* wall_seconds);

/* grove_model_run whose outputs are DLManagedTensor* (DLPack 0.6, as
 * grove_tensor_to_dlpack makes them), one per output, written to `managed`:
 * the call a binding makes on its fast path, without output handles. */
grove_status grove_model_run_dlpack(grove_model* model, const grove_tensor_desc* inputs,
                                    size_t input_count, void* stream, void** managed,
                                    size_t capacity, size_t* count);
/* grove_model_run_dlpack inside grove_invocation_begin(invocation_key) ...
 * grove_invocation_end(), as one call (the invocation ends whatever the run
 * does): the torch door's call of a graph. */
grove_status grove_model_run_dlpack_invocation(grove_model* model, uint64_t invocation_key,
                                               const grove_tensor_desc* inputs, size_t input_count,
                                               void* stream, void** managed, size_t capacity,
                                               size_t* count);
/* grove_model_run_handout's invocation_key for a call outside any invocation. */
#define GROVE_NO_INVOCATION UINT64_MAX
/* The torch door's call of a graph (Note [Outputs over cached storage],
 * capi/handout.cc). First runs the deleters of the `release_count`
 * DLManagedTensor* in `release` (grove's, from earlier calls; refused all
 * together, before anything runs, if one is not grove's), then runs like
 * grove_model_run_dlpack_invocation (GROVE_NO_INVOCATION: like
 * grove_model_run_dlpack) and also writes to keys[i] a key of output i: two
 * outputs of one model get the same key only when their address, device,
 * dtype, shape and strides are all equal. */
grove_status grove_model_run_handout(grove_model* model, uint64_t invocation_key,
                                     void* const* release, size_t release_count,
                                     const grove_tensor_desc* inputs, size_t input_count,
                                     void* stream, void** managed, uint64_t* keys, size_t capacity,
                                     size_t* count);
/* A new DLManagedTensor* with the address, shape, strides, dtype and device of
 * `managed_tensor` (one grove made, alive) that holds no reference to its
 * memory: its deleter frees only itself. Its memory may be read only while
 * something else holds a reference (for a binding's cache of output storage). */
grove_status grove_dlpack_unowned(const void* managed_tensor, void** unowned);
/* Runs the deleters of `count` DLManagedTensor* grove made (refused all
 * together if one is not grove's). */
grove_status grove_dlpack_release(void* const* managed, size_t count);
/* GROVE_OK while the memory of a DLManagedTensor grove made may be read;
 * GROVE_ERROR_STALE (with the reason) once a later replay overwrote it or its
 * step ended. The tensor must still be alive (its deleter not yet called). */
grove_status grove_dlpack_check(const void* managed_tensor);
/* Kept values (Note [Saved values kept in grove], capi/kept_values.cc): a
 * training step's saved activations passed from its forward to its backward
 * inside grove. grove_model_run_keeping runs the model like
 * grove_model_run_dlpack, writes DLManagedTensor* of the outputs listed in
 * `handed` (output indices) to managed[0..handed_count), and keeps the outputs
 * listed in `kept` in a new set, writing to *token a DLManagedTensor* (a
 * one-element int64 host tensor) that owns the set: the set lives until the
 * token's deleter runs; its one element is `tag` (the caller's, to tell its
 * sets apart). *token is NULL when kept_count is 0. */
grove_status grove_model_run_keeping(grove_model* model, const grove_tensor_desc* inputs,
                                     size_t input_count, void* stream, const int64_t* handed,
                                     size_t handed_count, void** managed, const int64_t* kept,
                                     size_t kept_count, int64_t tag, void** token);
/* Runs the model on `source_count` inputs: input i is kept value sources[i] of
 * the set whose token's data pointer is `token_data` (sources[i] >= 0), or the
 * next of the `input_count` descriptions (sources[i] == -1). Outputs as
 * grove_model_run_dlpack. GROVE_ERROR_STALE when a kept value it reads was
 * overwritten by a later replay (grove_kept_check says which). */
grove_status grove_model_run_with_kept(grove_model* model, const void* token_data,
                                       const int64_t* sources, size_t source_count,
                                       const grove_tensor_desc* inputs, size_t input_count,
                                       void* stream, void** managed, size_t capacity,
                                       size_t* count);
/* *first_stale: the index of the set's first value that may no longer be read, or -1. */
grove_status grove_kept_check(const void* token_data, int64_t* first_stale);
/* A DLManagedTensor* of kept value `index` (for a caller that needs it as a tensor). */
grove_status grove_kept_value(const void* token_data, size_t index, void** managed_tensor);
/* The dtype (grove_dtype) of output `index`, known at compile time. */
grove_status grove_model_output_dtype(const grove_model* model, size_t index, int32_t* dtype);
/* How many borrowed inputs (NULL release) were copied because an output still
 * viewed them after a call (Note [Borrowed inputs]). */
grove_status grove_model_borrowed_copies(const grove_model* model, int64_t* count);

/* A new handle to param or buffer `name`. */
grove_status grove_model_state(const grove_model* model, const char* name, grove_tensor** tensor);

/* Starts a new step: outputs of earlier calls may be overwritten by later ones. */
grove_status grove_model_mark_step_begin(grove_model* model);
/* Several models run as one computation: the graph calls the calling thread
 * makes until the matching grove_invocation_end share one generation of its
 * trees, so an output of one model stays valid as another's input (Note
 * [Invocations of several models]). `key` 0 opens a fresh invocation; any
 * other key (below 2^63) is the caller's, and a later invocation under the
 * same key continues the same generation (PyTorch's dynamo generation across
 * a graph break). Nested begins keep the outermost key; each begin needs one
 * end on the same thread. */
grove_status grove_invocation_begin(uint64_t key);
grove_status grove_invocation_end(void);
/* Trees of CUDA graphs across threads. Each thread records and replays into
 * trees of its own (one per device). A call made on another thread for the
 * same step, such as the backward that PyTorch's autograd runs on its device
 * thread, must use the trees of the thread that ran the forward: take them
 * there with grove_trees_of_thread, and wrap the call on the other thread in
 * grove_trees_enter / grove_trees_exit (nestable). The owning thread must not
 * call grove at the same time. A handle keeps the trees alive; free it with
 * grove_trees_destroy. */
typedef struct grove_trees grove_trees;
grove_status grove_trees_of_thread(grove_trees** trees);
grove_status grove_trees_enter(const grove_trees* trees);
/* Fails with GROVE_ERROR_INVALID_ARGUMENT when no grove_trees_enter is open. */
grove_status grove_trees_exit(void);
void grove_trees_destroy(grove_trees* trees);

/* The backend's stats as JSON and its Graphviz picture: new strings freed
 * with grove_string_free. */
grove_status grove_model_stats_json(const grove_model* model, char** text);
grove_status grove_model_dot(const grove_model* model, char** text);
void grove_string_free(char* text);

/* Output tensors. A handle holds a reference: the memory stays grove's until
 * every handle and every DLPack tensor made from it is gone. */
void grove_tensor_destroy(grove_tensor* tensor);
grove_status grove_tensor_dtype(const grove_tensor* tensor, int32_t* dtype);
grove_status grove_tensor_device(const grove_tensor* tensor, int32_t* device_type,
                                 int32_t* device_index);
grove_status grove_tensor_rank(const grove_tensor* tensor, int32_t* rank);
/* Copies rank entries each into shape / strides (in elements). */
grove_status grove_tensor_shape(const grove_tensor* tensor, int64_t* shape);
grove_status grove_tensor_strides(const grove_tensor* tensor, int64_t* strides);
/* The address of element 0; GROVE_ERROR_STALE when a later replay overwrote
 * the memory or the step that made it ended (the message says which). */
grove_status grove_tensor_data(const grove_tensor* tensor, void** data);
/* *valid = 1 while the data may be read, 0 once it is stale; then
 * grove_tensor_data fails with the reason. Never fails for a live handle. */
grove_status grove_tensor_is_valid(const grove_tensor* tensor, int32_t* valid);
/* Copies the elements, in row-major order, into `host` (nbytes must be
 * numel * element size); synchronous. */
grove_status grove_tensor_copy_to_host(const grove_tensor* tensor, void* host, size_t nbytes);

/* A DLManagedTensor* (DLPack 0.6, <dlpack/dlpack.h>) viewing the tensor's
 * memory with a reference of its own; its deleter releases that reference.
 * sim tensors are reported as kDLCPU (their memory is host memory), cuda ones
 * as kDLCUDA. Fails with GROVE_ERROR_STALE on stale data: check
 * grove_tensor_is_valid before every later read (python/grove does). */
grove_status grove_tensor_to_dlpack(const grove_tensor* tensor, void** managed_tensor);

/* Collective groups of data-parallel ranks that are processes: rank 0 makes
 * the id (at most GROVE_GROUP_ID_MAX bytes; NCCL's unique id on cuda, a TCP
 * endpoint on sim and cpu) and hands it to every rank through a channel they
 * already share (torch.distributed), and each rank joins; the group becomes
 * the device's, which "gradient_all_reduce" programs use. *size is the id's
 * length (also when `capacity` is too small). grove_group_join waits at most
 * timeout_ms for the other ranks. */
#define GROVE_GROUP_ID_MAX 256
grove_status grove_group_new_id(const char* device, void* id, size_t capacity, size_t* size);
grove_status grove_group_join(const char* device, int32_t rank, int32_t world_size, const void* id,
                              size_t size, int64_t timeout_ms);
/* Uninstalls the device's group (the other ranks are not told). */
grove_status grove_group_leave(const char* device);

#ifdef __cplusplus
}
#endif

#endif /* GROVE_CAPI_GROVE_H_ */
