// Internal errors: thrown inside the library, turned into an fa_status and a per-thread message
// at the C boundary (api.cpp). Messages name the argument, its value and the expectation.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "flashattn/flashattn.h"

namespace fa {

class ApiError : public std::runtime_error {
 public:
  ApiError(fa_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  fa_status status() const { return status_; }

 private:
  fa_status status_;
};

template <typename... Args>
[[noreturn]] void fail(fa_status status, const Args&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw ApiError(status, os.str());
}

}  // namespace fa
