#include "server/error.h"

#include <nlohmann/json.hpp>

namespace vtllm::server {

ApiError BadRequest(const std::string& param, const std::string& message) {
  return ApiError(400, "BadRequestError", message, param);
}
ApiError NotFound(const std::string& param, const std::string& message) {
  return ApiError(404, "NotFoundError", message, param);
}
ApiError Unauthorized() { return ApiError(401, "AuthenticationError", "Unauthorized"); }
ApiError PayloadTooLarge(size_t limit) {
  return ApiError(413, "RequestEntityTooLarge",
                  "Request body is larger than the server accepts (" + std::to_string(limit) + " bytes).");
}
ApiError MethodNotAllowed(const std::string& method, const std::string& path) {
  return ApiError(405, "MethodNotAllowed", "Method " + method + " is not allowed on " + path + ".");
}
ApiError ServiceUnavailable(const std::string& message) {
  return ApiError(503, "ServiceUnavailableError", message);
}
ApiError InternalError(const std::string& message) { return ApiError(500, "InternalServerError", message); }

std::string ErrorBody(const ApiError& e) {
  nlohmann::ordered_json err;
  err["message"] = e.what();
  err["type"] = e.type();
  err["param"] = e.param().empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.param());
  err["code"] = e.status();
  nlohmann::ordered_json body;
  body["error"] = std::move(err);
  // Messages may quote client input: never let a stray byte turn an error into an exception.
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace vtllm::server
