/* vtllm C ABI: OpenAI request bodies in, response and chunk JSON out.
 *
 * An engine runs one model; requests are /v1/chat/completions bodies (when they have
 * "messages") or /v1/completions bodies, validated as the HTTP server validates them.
 * Responses and chunks are the JSON objects the server would send (without SSE framing).
 *
 * Every function returning vtllm_status reports failures as a status plus a message for the
 * calling thread (vtllm_last_error). Strings the library returns are freed with vtllm_free.
 * Destroy an engine's requests before the engine. Functions may be called from several
 * threads at once, each request being used by one thread at a time.
 */
#ifndef VTLLM_H
#define VTLLM_H

#ifdef __cplusplus
extern "C" {
#endif

#define VTLLM_ABI_VERSION 1
typedef struct vtllm_engine vtllm_engine;
typedef struct vtllm_request vtllm_request;
typedef enum { VTLLM_OK = 0, VTLLM_ERR_INVALID_ARGUMENT = 1, VTLLM_ERR_NOT_FOUND = 2,
               VTLLM_ERR_LOAD = 3, VTLLM_ERR_RUNTIME = 4, VTLLM_ERR_ABORTED = 5 } vtllm_status;
int vtllm_abi_version(void);
const char* vtllm_last_error(void);  /* this thread's last failure, valid until its next call */
/* model_dir NULL: the embedded default model. options_json NULL or an object whose keys are the
   serve flags without dashes, '-' as '_' (e.g. {"device":"cuda","max_model_len":4096}). */
vtllm_status vtllm_engine_create(const char* model_dir, const char* options_json, vtllm_engine** out);
void vtllm_engine_destroy(vtllm_engine* e);
/* request_json: a /v1/chat/completions body when it has "messages", else a /v1/completions body. */
vtllm_status vtllm_complete(vtllm_engine* e, const char* request_json, char** response_json);
typedef int (*vtllm_chunk_fn)(const char* chunk_json, void* user);  /* non-zero: abort */
vtllm_status vtllm_stream(vtllm_engine* e, const char* request_json, vtllm_chunk_fn on_chunk, void* user);
vtllm_status vtllm_submit(vtllm_engine* e, const char* request_json, vtllm_request** out);
/* waits up to timeout_ms; *chunk_json NULL when none arrived; *finished 1 after the last chunk */
vtllm_status vtllm_poll(vtllm_request* r, int timeout_ms, char** chunk_json, int* finished);
vtllm_status vtllm_abort(vtllm_request* r);
void vtllm_request_destroy(vtllm_request* r);
void vtllm_free(void* p);  /* frees strings the library returned */

#ifdef __cplusplus
}
#endif

#endif /* VTLLM_H */
