/* The C API from C itself: the header compiles as C, and a compile, a run, a
 * DLPack export and a failing call behave as documented (sim). Exits non-zero
 * naming the first check that failed. */
#include <dlpack/dlpack.h>
#include <stdio.h>
#include <string.h>

#include "capi/grove.h"

static int failures = 0;

#define CHECK(condition)                                                                \
  do {                                                                                  \
    if (!(condition)) {                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, \
              #condition, grove_last_error());                                          \
      ++failures;                                                                       \
    }                                                                                   \
  } while (0)

static const char* kProgram =
    "{\"name\": \"c_relu\", \"inputs\": [{\"name\": \"x\", \"shape\": [2, 3], \"dtype\": \"f32\"}],"
    " \"nodes\": [{\"name\": \"y\", \"op\": \"relu\", \"inputs\": [\"x\"]}], \"outputs\": [\"y\"]}";

static int released = 0;
static void release(void* context) {
  (void)context;
  ++released;
}

int main(void) {
  grove_model* model = NULL;
  CHECK(grove_capi_version() == GROVE_CAPI_VERSION);
  CHECK(grove_compile(kProgram, "{\"device\": \"sim\", \"backend\": \"cudagraphs\"}", NULL, 0,
                      &model) == GROVE_OK);
  if (model == NULL) return 1;
  float x[6] = {-1.5f, 2.0f, -0.25f, 3.5f, 0.0f, -7.0f};
  const float expected[6] = {0.0f, 2.0f, 0.0f, 3.5f, 0.0f, 0.0f};
  int64_t shape[2] = {2, 3};
  grove_tensor_desc desc = {x, GROVE_F32, GROVE_DEVICE_SIM, 0, 2, shape, NULL, release, NULL};
  for (int call = 0; call < 4; ++call) {
    void* managed[1] = {NULL};
    size_t count = 0;
    CHECK(grove_model_run_dlpack(model, &desc, 1, NULL, managed, 1, &count) == GROVE_OK);
    CHECK(count == 1);
    if (count == 1) {
      DLManagedTensor* y = (DLManagedTensor*)managed[0];
      CHECK(y->dl_tensor.ndim == 2 && y->dl_tensor.shape[1] == 3);
      CHECK(memcmp(y->dl_tensor.data, expected, sizeof(expected)) == 0);
      y->deleter(y);
    }
  }
  CHECK(released == 4);
  size_t count = 0;
  CHECK(grove_model_run(model, NULL, 0, NULL, NULL, 0, &count) == GROVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(grove_last_error(), "returns 1 outputs") != NULL);
  char* stats = NULL;
  CHECK(grove_model_stats_json(model, &stats) == GROVE_OK);
  CHECK(stats != NULL && stats[0] == '{');
  grove_string_free(stats);
  grove_model_destroy(model);
  if (failures == 0) printf("capi_c_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
