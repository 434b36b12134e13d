// progress.cpp — see progress.h.
#include "tools/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace specpress::tools {

std::string format_duration(double s) {
  if (s < 0 || s != s) return "?";
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled, int64_t resumed)
    : label_(std::move(label)), total_(total), resumed_(resumed), enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {
  last_draw_ = start_ - std::chrono::seconds(1);
  draw(true);
}

void ProgressBar::update(int64_t done, const std::string& status) {
  done_ = done;
  status_ = status;
  draw(done_ >= total_);
}

void ProgressBar::finish(const std::string& status) {
  if (finished_) return;
  done_ = total_;
  stop(status);
}

void ProgressBar::stop(const std::string& status) {
  if (finished_) return;
  if (!status.empty()) status_ = status;
  if (done_ != drawn_done_ || status_ != drawn_status_) draw(true);  // a log gets the last line once
  if (enabled_ && tty_) std::fputc('\n', stderr);
  finished_ = true;
}

void ProgressBar::note(const std::string& line) {
  const bool bar_on_line = enabled_ && tty_ && !finished_;
  if (bar_on_line) std::fputs("\r\x1b[K", stderr);
  std::fprintf(stderr, "%s\n", line.c_str());
  if (bar_on_line) draw(true);
  std::fflush(stderr);
}

void ProgressBar::draw(bool force) {
  if (!enabled_ || finished_) return;
  auto now = std::chrono::steady_clock::now();
  // A terminal gets a bar redrawn in place; a log file gets a full line every 10 s at most.
  if (!force && now - last_draw_ < (tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(10000))) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int width = 30;
  const int filled = total_ > 0 ? static_cast<int>(width * done_ / total_) : width;
  std::string bar(filled, '#');
  bar.resize(width, '.');
  const int64_t done_here = done_ - std::min(resumed_, done_);  // the resumed units took no time here
  const double eta = done_ >= total_ ? 0
                     : done_here > 0 ? elapsed * static_cast<double>(total_ - done_) / static_cast<double>(done_here)
                                     : -1;
  drawn_done_ = done_;
  drawn_status_ = status_;
  std::fprintf(stderr, tty_ ? "\r%s [%s] %lld/%lld  %s elapsed, ETA %s  %s\x1b[K" : "%s [%s] %lld/%lld  %s elapsed, ETA %s  %s\n",
               label_.c_str(), bar.c_str(),
               static_cast<long long>(done_), static_cast<long long>(total_), format_duration(elapsed).c_str(),
               eta >= 0 ? format_duration(eta).c_str() : "?", status_.c_str());
  std::fflush(stderr);
}

}  // namespace specpress::tools
