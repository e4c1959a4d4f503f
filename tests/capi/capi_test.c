/* The C ABI from C: every function of vtllm.h, success and error paths.
 * usage: capi_test MODEL_DIR (a checkpoint with a tokenizer) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vtllm.h>

static int failures = 0;
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__,    \
              __LINE__, #cond, vtllm_last_error());                              \
      ++failures;                                                                \
    }                                                                            \
  } while (0)

struct counter {
  int chunks, abort_after, saw_usage;
};

static int on_chunk(const char* chunk_json, void* user) {
  struct counter* c = (struct counter*)user;
  ++c->chunks;
  if (strstr(chunk_json, "\"usage\"") && strstr(chunk_json, "\"choices\":[]")) c->saw_usage = 1;
  return c->abort_after > 0 && c->chunks >= c->abort_after;
}

/* Another thread's failure leaves this thread's message alone. */
static void* fail_elsewhere(void* arg) {
  (void)arg;
  vtllm_engine* e = NULL;
  vtllm_engine_create("/nonexistent/model", NULL, &e);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
    return 2;
  }
  const char* model = argv[1];
  CHECK(vtllm_abi_version() == VTLLM_ABI_VERSION);

  /* engine_create: errors */
  vtllm_engine* e = NULL;
  CHECK(vtllm_engine_create(model, NULL, NULL) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(vtllm_engine_create("/nonexistent/model", NULL, &e) == VTLLM_ERR_LOAD && e == NULL);
  CHECK(strlen(vtllm_last_error()) > 0);
  CHECK(vtllm_engine_create(model, "{\"no_such_flag\": 1}", &e) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(vtllm_last_error(), "no_such_flag") != NULL);
  CHECK(vtllm_engine_create(model, "{\"device\": \"tpu\"}", &e) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(vtllm_engine_create(model, "not json", &e) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(vtllm_engine_create(model, "{\"reasoning_parser\": \"nope\"}", &e) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(vtllm_engine_create(model, "{\"kv_cache_dtype\": \"fp16\"}", &e) == VTLLM_ERR_INVALID_ARGUMENT && e == NULL);
  CHECK(strstr(vtllm_last_error(), "kv_cache_dtype") != NULL && strstr(vtllm_last_error(), "fp16") != NULL);
  /* an F8E4M3 KV cache */
  CHECK(vtllm_engine_create(model, "{\"kv_cache_dtype\": \"fp8\", \"threads\": 2, \"max_model_len\": 256}", &e) ==
        VTLLM_OK && e != NULL);
  if (e) {
    char* fp8_out = NULL;
    CHECK(vtllm_complete(e, "{\"prompt\": \"Hello\", \"max_tokens\": 4, \"ignore_eos\": true}", &fp8_out) == VTLLM_OK);
    CHECK(fp8_out && strstr(fp8_out, "\"completion_tokens\":4"));
    vtllm_free(fp8_out);
    vtllm_engine_destroy(e);
    e = NULL;
  }

  const char* options = "{\"max_model_len\": 512, \"threads\": 2, \"served_model_name\": \"tiny\", \"device\": \"cpu\"}";
  CHECK(vtllm_engine_create(model, options, &e) == VTLLM_OK && e != NULL);
  if (!e) return 1;

  /* complete */
  char* out = NULL;
  CHECK(vtllm_complete(e, "{\"prompt\": \"Hello\", \"max_tokens\": 4, \"temperature\": 0}", &out) == VTLLM_OK);
  CHECK(out && strstr(out, "\"object\":\"text_completion\"") && strstr(out, "\"completion_tokens\":4"));
  char* again = NULL;
  CHECK(vtllm_complete(e, "{\"prompt\": \"Hello\", \"max_tokens\": 4, \"temperature\": 0, \"stream\": true}", &again) == VTLLM_OK);
  /* greedy: the same text (the ids and timestamps differ) */
  if (out && again) {
    const char* a = strstr(out, "\"text\":");
    const char* b = strstr(again, "\"text\":");
    CHECK(a && b && strncmp(a, b, (size_t)(strstr(a, "\"logprobs\"") - a)) == 0);
  }
  vtllm_free(out);
  vtllm_free(again);
  out = NULL;
  CHECK(vtllm_complete(e, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 3}", &out) == VTLLM_OK);
  CHECK(out && strstr(out, "\"object\":\"chat.completion\"") && strstr(out, "\"role\":\"assistant\""));
  vtllm_free(out);

  /* complete: errors */
  out = NULL;
  CHECK(vtllm_complete(e, "{\"prompt\": \"x\", \"temperature\": -1}", &out) == VTLLM_ERR_INVALID_ARGUMENT && out == NULL);
  CHECK(strstr(vtllm_last_error(), "temperature") != NULL);
  pthread_t t;
  pthread_create(&t, NULL, fail_elsewhere, NULL);
  pthread_join(t, NULL);
  CHECK(strstr(vtllm_last_error(), "temperature") != NULL);  /* thread-local */
  CHECK(vtllm_complete(e, "{\"model\": \"other\", \"prompt\": \"x\"}", &out) == VTLLM_ERR_NOT_FOUND);
  CHECK(vtllm_complete(e, "{\"prompt\": ", &out) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(vtllm_complete(e, "{\"prompt\": [1, 2], \"max_tokens\": 100000}", &out) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(vtllm_complete(NULL, "{}", &out) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(vtllm_complete(e, NULL, &out) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(vtllm_complete(e, "{}", NULL) == VTLLM_ERR_INVALID_ARGUMENT);

  /* stream */
  struct counter c = {0, 0, 0};
  CHECK(vtllm_stream(e, "{\"prompt\": \"Hello\", \"max_tokens\": 5, \"ignore_eos\": true, \"stream_options\": {\"include_usage\": true}}", on_chunk, &c) == VTLLM_OK);
  CHECK(c.chunks >= 6 && c.saw_usage);
  struct counter chat = {0, 0, 0};
  CHECK(vtllm_stream(e, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 3, \"ignore_eos\": true}", on_chunk, &chat) == VTLLM_OK);
  CHECK(chat.chunks >= 4); /* the role chunk and three tokens */
  struct counter stop = {0, 2, 0};
  CHECK(vtllm_stream(e, "{\"prompt\": \"Hello\", \"max_tokens\": 50, \"ignore_eos\": true}", on_chunk, &stop) == VTLLM_ERR_ABORTED);
  CHECK(stop.chunks == 2);
  CHECK(vtllm_stream(e, "{\"prompt\": \"x\", \"top_p\": 7}", on_chunk, &c) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(vtllm_stream(e, "{\"prompt\": \"x\"}", NULL, &c) == VTLLM_ERR_INVALID_ARGUMENT);

  /* submit / poll */
  vtllm_request* r = NULL;
  CHECK(vtllm_submit(e, "{\"prompt\": \"Hello\", \"max_tokens\": 6, \"ignore_eos\": true}", &r) == VTLLM_OK && r);
  int finished = 0, chunks = 0, rounds = 0;
  while (r && !finished && rounds++ < 10000) {
    char* chunk = NULL;
    CHECK(vtllm_poll(r, 50, &chunk, &finished) == VTLLM_OK);
    if (chunk) {
      ++chunks;
      CHECK(strstr(chunk, "\"text_completion\"") != NULL);
      if (finished) CHECK(strstr(chunk, "\"finish_reason\":\"length\"") != NULL);
      vtllm_free(chunk);
    }
  }
  CHECK(finished && chunks == 6);
  char* none = (char*)1;
  CHECK(vtllm_poll(r, 0, &none, &finished) == VTLLM_OK && none == NULL && finished == 1);
  vtllm_request_destroy(r);

  /* submit, abort, drain: the last chunk says abort */
  r = NULL;
  CHECK(vtllm_submit(e, "{\"prompt\": \"Hello\", \"max_tokens\": 400, \"ignore_eos\": true}", &r) == VTLLM_OK && r);
  CHECK(vtllm_abort(r) == VTLLM_OK);
  finished = 0;
  rounds = 0;
  int saw_abort = 0;
  while (r && !finished && rounds++ < 10000) {
    char* chunk = NULL;
    CHECK(vtllm_poll(r, 50, &chunk, &finished) == VTLLM_OK);
    if (chunk && strstr(chunk, "\"finish_reason\":\"abort\"")) saw_abort = 1;
    vtllm_free(chunk);
  }
  CHECK(finished && saw_abort);
  vtllm_request_destroy(r);
  /* a request dropped while running is aborted by its destruction */
  r = NULL;
  CHECK(vtllm_submit(e, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 400}", &r) == VTLLM_OK);
  vtllm_request_destroy(r);

  /* submit / poll / abort: errors */
  r = (vtllm_request*)1;
  CHECK(vtllm_submit(e, "{\"prompt\": \"x\", \"n\": 0}", &r) == VTLLM_ERR_INVALID_ARGUMENT && r == NULL);
  CHECK(vtllm_submit(e, "{\"prompt\": \"x\"}", NULL) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(vtllm_poll(NULL, 0, &out, &finished) == VTLLM_ERR_INVALID_ARGUMENT);
  CHECK(vtllm_abort(NULL) == VTLLM_ERR_INVALID_ARGUMENT);
  vtllm_request_destroy(NULL);
  vtllm_free(NULL);

  vtllm_engine_destroy(e);
  vtllm_engine_destroy(NULL);

  /* model_dir NULL: the embedded default model */
  e = NULL;
  CHECK(vtllm_engine_create(NULL, "{\"threads\": 2}", &e) == VTLLM_OK && e != NULL);
  if (e) {
    out = NULL;
    CHECK(vtllm_complete(e, "{\"prompt\": \"The\", \"max_tokens\": 3}", &out) == VTLLM_OK && out != NULL);
    vtllm_free(out);
    vtllm_engine_destroy(e);
  }
  if (failures) fprintf(stderr, "%d checks failed\n", failures);
  else printf("capi_test: all checks passed\n");
  return failures ? 1 : 0;
}
