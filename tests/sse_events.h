// sse_events.h — Server-Sent Events bodies as the server's tests read them: each event's name (its "event: " line,
// as Anthropic's Messages stream sends one; empty where there is none, as in OpenAI's streams) and its data (parsed
// JSON; "[DONE]" as a string). Comment lines (": ...", which the server sends while a request waits) are skipped,
// as SSE clients do. A named event's data must name the same type.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace specpress::test {

template <typename Json>
std::vector<std::pair<std::string, Json>> sse_frames(const std::string& body) {
  std::vector<std::pair<std::string, Json>> frames;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an event without its blank line: " << body.substr(at);
    if (end == std::string::npos) break;
    const std::string frame = body.substr(at, end - at);
    at = end + 2;
    if (frame.rfind(":", 0) == 0) continue;
    std::string name, data_line = frame;
    if (frame.rfind("event: ", 0) == 0) {
      const size_t newline = frame.find('\n');
      EXPECT_NE(newline, std::string::npos) << "an event name without data: " << frame;
      if (newline == std::string::npos) continue;
      name = frame.substr(7, newline - 7);
      data_line = frame.substr(newline + 1);
    }
    EXPECT_EQ(data_line.rfind("data: ", 0), 0u) << frame;
    const std::string payload = data_line.substr(std::min<size_t>(6, data_line.size()));
    Json data = payload == "[DONE]" ? Json("[DONE]") : Json::parse(payload);
    if (!name.empty()) EXPECT_EQ(data["type"], name) << frame;
    frames.emplace_back(std::move(name), std::move(data));
  }
  return frames;
}

}  // namespace specpress::test
