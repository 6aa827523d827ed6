#include "report.h"

#include <atomic>
#include <cstdio>

namespace fa_trt {

namespace {
std::atomic<nvinfer1::ILoggerFinder*> g_finder{nullptr};

nvinfer1::ILogger* find_logger() {
  nvinfer1::ILoggerFinder* f = g_finder.load();
  return f ? f->findLogger() : nullptr;
}
}  // namespace

void set_logger_finder(nvinfer1::ILoggerFinder* finder) { g_finder.store(finder); }

std::string Reporter::message(const std::string& what) const {
  return "FlashAttention plugin" + (layer_.empty() ? std::string() : " (" + layer_ + ")") + ": " + what;
}

void Reporter::error(nvinfer1::ErrorCode code, const std::string& what) const {
  const std::string m = message(what);
  if (recorder_) {
    recorder_->reportError(code, m.c_str());
  } else if (nvinfer1::ILogger* l = find_logger()) {
    l->log(nvinfer1::ILogger::Severity::kERROR, m.c_str());
  } else {
    std::fprintf(stderr, "%s\n", m.c_str());
  }
}

void Reporter::warning(const std::string& what) const {
  const std::string m = message(what);
  if (nvinfer1::ILogger* l = find_logger())
    l->log(nvinfer1::ILogger::Severity::kWARNING, m.c_str());
  else
    std::fprintf(stderr, "%s\n", m.c_str());
}

}  // namespace fa_trt
