/* A C program against the installed package's vtllm::capi: links every function of
 * <vtllm.h> and runs the paths that need no model. */
#include <stdio.h>
#include <string.h>

#include <vtllm.h>

int main(void) {
  int bad = 0;
  vtllm_engine* e = NULL;
  vtllm_request* r = NULL;
  char* out = NULL;
  int finished = 0;
  if (vtllm_abi_version() != VTLLM_ABI_VERSION) ++bad;
  if (vtllm_engine_create("/nonexistent/model", "{\"device\": \"cpu\"}", &e) != VTLLM_ERR_LOAD || e != NULL ||
      strlen(vtllm_last_error()) == 0)
    ++bad;
  /* the embedded default model: one completion */
  if (vtllm_engine_create(NULL, "{\"threads\": 1}", &e) != VTLLM_OK || e == NULL) {
    ++bad;
  } else {
    if (vtllm_complete(e, "{\"prompt\": \"The\", \"max_tokens\": 2}", &out) != VTLLM_OK || !strstr(out, "text_completion")) ++bad;
    vtllm_free(out);
    out = NULL;
    vtllm_engine_destroy(e);
    e = NULL;
  }
  if (vtllm_complete(NULL, "{}", &out) != VTLLM_ERR_INVALID_ARGUMENT) ++bad;
  if (vtllm_stream(NULL, "{}", NULL, NULL) != VTLLM_ERR_INVALID_ARGUMENT) ++bad;
  if (vtllm_submit(NULL, "{}", &r) != VTLLM_ERR_INVALID_ARGUMENT || r != NULL) ++bad;
  if (vtllm_poll(NULL, 0, &out, &finished) != VTLLM_ERR_INVALID_ARGUMENT) ++bad;
  if (vtllm_abort(NULL) != VTLLM_ERR_INVALID_ARGUMENT) ++bad;
  vtllm_request_destroy(NULL);
  vtllm_engine_destroy(NULL);
  vtllm_free(NULL);
  printf("capi consumer: %s (last error: %s)\n", bad ? "FAILED" : "ok", vtllm_last_error());
  return bad ? 1 : 0;
}
