// Errors the OpenAI front returns, in one type, rendered into OpenAI's error body by one
// function, as vLLM does:
//   {"error": {"message": "...", "type": "BadRequestError", "param": "temperature", "code": 400}}
#pragma once

#include <stdexcept>
#include <string>

namespace vtllm::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = {})
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }  // empty: null

 private:
  int status_;
  std::string type_;
  std::string param_;
};

// The error kinds the server uses, with vLLM's type names.
ApiError BadRequest(const std::string& param, const std::string& message);       // 400
ApiError NotFound(const std::string& param, const std::string& message);         // 404
ApiError Unauthorized();                                                          // 401
ApiError PayloadTooLarge(size_t limit);                                           // 413
ApiError MethodNotAllowed(const std::string& method, const std::string& path);    // 405
ApiError ServiceUnavailable(const std::string& message);                          // 503
ApiError InternalError(const std::string& message);                               // 500

// The one place an error becomes a response body.
std::string ErrorBody(const ApiError& e);

}  // namespace vtllm::server
