// fa-bench's live progress on stderr: one line, redrawn after every call of the cell being
// measured (per repeat, not per cell), with the cell's place in the run, its calls done and the
// time left. Drawn only when enabled (stderr is a terminal, or --progress on); without an estimate
// of the run (fa-bench run), a cell that will take long says so on a line of its own either way.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace fabench {

// "12 s", "3 min 20 s", "1 h 5 min": a duration to read at a glance.
std::string duration_text(double seconds);

class Progress {
 public:
  using OnCall = std::function<void(const char* phase, int done, int planned)>;

  // estimate_s: the seconds each of the `cells` cells should take (empty: unknown).
  Progress(bool enabled, size_t cells, std::vector<double> estimate_s = {});
  ~Progress() { clear(); }

  // Starts cell i (0-based) of `calls` calls in all (warm-up and timed); the returned function
  // is the cell's Config::on_call.
  OnCall cell(size_t i, std::string label, int calls);
  // Erases the live line, so that a result line can be printed in its place.
  void clear();

 private:
  using Clock = std::chrono::steady_clock;
  void draw(const char* phase, int done, int planned);
  double seconds_since(Clock::time_point t) const;

  bool enabled_;
  size_t cells_;
  std::vector<double> estimate_s_;
  Clock::time_point run_start_, cell_start_, last_draw_;
  size_t cell_ = 0;
  std::string label_;
  int calls_ = 0, calls_done_ = 0;
  bool drawn_ = false, warned_ = false;
};

}  // namespace fabench
