#include "progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "text.h"  // tools/common: fatools::sig

namespace fabench {
namespace {

constexpr double kRedrawSeconds = 0.1;    // at most ten redraws a second: writes cost time too
constexpr double kLongCellSeconds = 10;   // a cell expected to take longer says so up front
constexpr int kBarWidth = 20;

}  // namespace

std::string duration_text(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  if (s < 60) return fatools::sig(s, s < 10 ? 2 : 3) + " s";
  const long total = std::lround(s);
  if (total < 3600) return fmt::format("{} min {} s", total / 60, total % 60);
  return fmt::format("{} h {} min", total / 3600, total % 3600 / 60);
}

Progress::Progress(bool enabled, size_t cells, std::vector<double> estimate_s)
    : enabled_(enabled), cells_(cells), estimate_s_(std::move(estimate_s)), run_start_(Clock::now()) {
  if (estimate_s_.size() != cells_) estimate_s_.clear();
}

double Progress::seconds_since(Clock::time_point t) const {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Progress::OnCall Progress::cell(size_t i, std::string label, int calls) {
  cell_ = i;
  label_ = std::move(label);
  calls_ = std::max(calls, 1);
  calls_done_ = 0;
  warned_ = false;
  cell_start_ = Clock::now();
  return [this](const char* phase, int done, int planned) { draw(phase, done, planned); };
}

void Progress::draw(const char* phase, int done, int planned) {
  ++calls_done_;
  const double in_cell = seconds_since(cell_start_);
  // The cell's calls so far, extrapolated; its first call also paid for the allocation.
  const double cell_left = in_cell / calls_done_ * std::max(0, calls_ - calls_done_);
  if (!warned_ && estimate_s_.empty() && in_cell + cell_left > kLongCellSeconds) {
    warned_ = true;
    clear();
    std::fputs(fmt::format("fa-bench: {}: about {} ({} calls of {} each)\n", label_,
                           duration_text(in_cell + cell_left), calls_,
                           duration_text(in_cell / calls_done_))
                   .c_str(),
               stderr);
  }
  if (!enabled_) return;
  if (drawn_ && done < planned && seconds_since(last_draw_) < kRedrawSeconds) return;
  last_draw_ = Clock::now();

  const int filled = int(std::lround(double(kBarWidth) * calls_done_ / calls_));
  std::string line = fmt::format("[{}/{}] {}: {} {}/{} [{}{}] {} in, ~{} left", cell_ + 1, cells_,
                                 label_, phase, done, planned, std::string(size_t(std::min(filled, kBarWidth)), '#'),
                                 std::string(size_t(kBarWidth - std::min(filled, kBarWidth)), '.'),
                                 duration_text(in_cell), duration_text(cell_left));
  if (!estimate_s_.empty()) {
    // The cells still to come, scaled by how the finished ones compared with their estimate.
    const double done_est = std::accumulate(estimate_s_.begin(), estimate_s_.begin() + long(cell_), 0.0);
    const double run_before = seconds_since(run_start_) - in_cell;
    const double scale = cell_ > 0 && done_est > 0 ? run_before / done_est : 1.0;
    const double later = std::accumulate(estimate_s_.begin() + long(cell_) + 1, estimate_s_.end(), 0.0);
    line += fmt::format("; run ~{} left", duration_text(cell_left + scale * later));
  }
  std::fputs(("\r" + line + "\033[K").c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::clear() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace fabench
