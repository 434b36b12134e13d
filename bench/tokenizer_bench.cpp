// tokenizer_bench.cpp — single-threaded encode throughput of specpress's tokenizer on a corpus, and
// an exact id comparison with ids produced by another implementation (bench/tokenizer_vs_hf.sh
// feeds it Hugging Face's). A benchmark program, not a test: it prints numbers and never asserts
// a speed.
//
//   tokenizer_bench -m DIR --corpus corpus.jsonl [--repeat N] [--check-ids hf_ids.bin]
//                   [--ids-out our_ids.bin]
//
// corpus.jsonl: one document per line, each a JSON string. hf_ids.bin / our_ids.bin: for each
// document, a little-endian uint32 count followed by that many uint32 ids.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

std::vector<std::string> read_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) specpress::fail("--corpus: cannot open {}", path);
  std::vector<std::string> docs;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    if (!j.is_string()) specpress::fail("{}: line {} is not a JSON string", path, docs.size() + 1);
    docs.push_back(j.get<std::string>());
  }
  return docs;
}

std::vector<std::vector<uint32_t>> read_ids(const std::string& path, size_t docs) {
  std::ifstream in(path, std::ios::binary);
  if (!in) specpress::fail("--check-ids: cannot open {}", path);
  std::vector<std::vector<uint32_t>> all;
  for (size_t d = 0; d < docs; ++d) {
    uint32_t count = 0;
    if (!in.read(reinterpret_cast<char*>(&count), 4)) specpress::fail("{}: ends at document {}", path, d);
    std::vector<uint32_t> ids(count);
    if (!in.read(reinterpret_cast<char*>(ids.data()), 4 * static_cast<std::streamsize>(count))) {
      specpress::fail("{}: document {} is truncated", path, d);
    }
    all.push_back(std::move(ids));
  }
  return all;
}

// Compares our ids with the reference ones; prints the first difference. Returns true if equal.
bool compare(const std::vector<std::vector<int32_t>>& ours,
             const std::vector<std::vector<uint32_t>>& theirs, const specpress::tok::Tokenizer& t) {
  for (size_t d = 0; d < ours.size(); ++d) {
    const auto& a = ours[d];
    const auto& b = theirs[d];
    size_t i = 0;
    while (i < a.size() && i < b.size() && static_cast<uint32_t>(a[i]) == b[i]) ++i;
    if (i == a.size() && i == b.size()) continue;
    std::printf("MISMATCH in document %zu at token %zu (specpress %zu tokens, reference %zu)\n", d, i,
                a.size(), b.size());
    auto show = [&](const char* who, auto ids) {
      std::printf("  %-9s", who);
      for (size_t k = i >= 3 ? i - 3 : 0; k < std::min(ids.size(), i + 4); ++k) {
        std::printf(" %u(%s)", static_cast<uint32_t>(ids[k]),
                    t.id_to_token(static_cast<int32_t>(ids[k])).c_str());
      }
      std::printf("\n");
    };
    show("specpress", a);
    show("reference", b);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, corpus, check_ids, ids_out;
  int repeat = 3;
  CLI::App app{"specpress tokenizer throughput (single thread) and id check"};
  app.add_option("-m,--model", model, "tokenizer directory or tokenizer.json")->required();
  app.add_option("--corpus", corpus, "JSONL file, one JSON string per document")->required();
  app.add_option("--repeat", repeat, "passes over the corpus; the fastest is reported")->check(CLI::PositiveNumber);
  app.add_option("--check-ids", check_ids, "reference ids to compare with (count + ids, uint32 LE)");
  app.add_option("--ids-out", ids_out, "write our ids in the same format");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto t0 = std::chrono::steady_clock::now();
    const auto tokenizer = std::filesystem::is_directory(model)
                               ? specpress::tok::Tokenizer::from_dir(model)
                               : specpress::tok::Tokenizer::from_file(model);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::vector<std::string> docs = read_corpus(corpus);
    size_t bytes = 0;
    for (const auto& d : docs) bytes += d.size();

    std::vector<std::vector<int32_t>> ids(docs.size());
    double best = 1e30, first = 0;
    size_t tokens = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto start = std::chrono::steady_clock::now();
      for (size_t i = 0; i < docs.size(); ++i) ids[i] = tokenizer.encode(docs[i]);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (r == 0) first = s;
      best = std::min(best, s);
    }
    for (const auto& v : ids) tokens += v.size();
    std::printf("specpress: load %.3f s (regex JIT %s)\n", load_s, tokenizer.regex_jit() ? "on" : "off");
    std::printf("specpress: %zu documents, %zu bytes, %zu tokens\n", docs.size(), bytes, tokens);
    std::printf("specpress: first pass %.3f s, best of %d %.3f s\n", first, repeat, best);
    std::printf("RESULT specpress %.2f MB/s %.0f tokens/s\n", bytes / best / 1e6, tokens / best);
    if (!ids_out.empty()) {
      std::ofstream out(ids_out, std::ios::binary);
      for (const auto& v : ids) {
        const auto count = static_cast<uint32_t>(v.size());
        out.write(reinterpret_cast<const char*>(&count), 4);
        out.write(reinterpret_cast<const char*>(v.data()), 4 * static_cast<std::streamsize>(v.size()));
      }
      if (!out) specpress::fail("--ids-out: cannot write {}", ids_out);
    }
    if (!check_ids.empty()) {
      if (!compare(ids, read_ids(check_ids, docs.size()), tokenizer)) return 1;
      std::printf("IDS IDENTICAL over %zu documents, %zu tokens\n", docs.size(), tokens);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
