// SPDX-License-Identifier: Apache-2.0
// Status: how every core entry point reports success or failure.
// The core never throws; bindings turn a failed Status into an exception.
#pragma once

#include <string>
#include <utility>

namespace reducekit {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something the op cannot accept
  kUnsupported,      // valid input this build does not handle (yet)
  kCudaError,        // a CUDA runtime call or launch failed
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  static Status invalid_argument(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status unsupported(std::string message) {
    return Status(StatusCode::kUnsupported, std::move(message));
  }
  static Status cuda_error(std::string message) {
    return Status(StatusCode::kCudaError, std::move(message));
  }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Returns early from the enclosing function when `expr` yields a failed Status.
#define REDUCEKIT_RETURN_IF_ERROR(expr)            \
  do {                                             \
    ::reducekit::Status reducekit_status_ = (expr); \
    if (!reducekit_status_.is_ok()) return reducekit_status_; \
  } while (0)

}  // namespace reducekit
