// progress.h — a one-line progress bar with rate and ETA on stderr, for long jobs (bench, diagnose,
// training). Redraws at most a few times a second; prints a final newline when done.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace specpress::tools {

class ProgressBar {
 public:
  // `resumed`: units a resumed job finished before this process; the ETA counts only this process's rate.
  ProgressBar(std::string label, int64_t total, bool enabled = true, int64_t resumed = 0);
  // Sets the number of finished units and a short status text (e.g. "tau 6.2").
  void update(int64_t done, const std::string& status = "");
  void finish(const std::string& status = "");
  // Ends the bar where the job stopped short of its total (an interruption, a --stop-after).
  void stop(const std::string& status = "");
  // A line on stderr between the bar's redraws (also with the bar off: what it says is not progress).
  void note(const std::string& line);

 private:
  void draw(bool force);
  std::string label_, status_, drawn_status_;  // drawn_*: what the last line showed
  int64_t total_, resumed_, done_ = 0, drawn_done_ = -1;
  bool enabled_, tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace specpress::tools
