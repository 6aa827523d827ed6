// The C boundary's error handling, shared by every file of C entry points (api.cpp, ring.cpp):
// the body runs, and any exception becomes a status plus this thread's message (fa_last_error).
// No exception crosses the C ABI.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "core/error.h"
#include "flashattn/flashattn.h"

namespace fa::api {

// This thread's message of the last failed call ("" after a success).
std::string& last_error();

template <typename F>
fa_status guarded(F&& body) {
  try {
    body();
    last_error().clear();
    return FA_OK;
  } catch (const ApiError& e) {
    last_error() = e.what();
    return e.status();
  } catch (const std::bad_alloc&) {
    last_error() = "out of host memory";
    return FA_ERROR_INTERNAL;
  } catch (const std::exception& e) {
    last_error() = std::string("internal error: ") + e.what();
    return FA_ERROR_INTERNAL;
  } catch (...) {
    last_error() = "internal error: unknown exception";
    return FA_ERROR_INTERNAL;
  }
}

}  // namespace fa::api
