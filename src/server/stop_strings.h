// stop_strings.h — OpenAI "stop" sequences over streamed text. Text is released only once no stop string
// can begin in it, so a client never receives part of a stop string, and the output ends right before the
// first one to complete (the stop string itself is not part of the output), however the text is split into pushes.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace specpress::server {

// The length of the longest proper prefix of `word` that `text` ends with (text that may still become `word`).
size_t partial_match_at_end(std::string_view text, std::string_view word);

class StopStrings {
 public:
  // `stops` must be non-empty strings (the request parser checks); none means every push is released whole.
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds generated text; returns the part of the output that is now final (possibly empty). After a stop
  // string is found, returns the text before it once, then nothing.
  std::string push(std::string_view text);
  // End of the generation: the text still held back (nothing after a stop string).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that ended the output (empty when none did).
  const std::string& stopping_word() const { return stopping_word_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // text that may be the beginning of a stop string
  bool stopped_ = false;
  std::string stopping_word_;
};

}  // namespace specpress::server
