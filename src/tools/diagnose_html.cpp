// diagnose_html.cpp — the diagnose report as one self-contained HTML page with inline SVG charts.
#include <fmt/format.h>

#include <cmath>

#include "tools/build_info.h"
#include "tools/diagnose.h"
#include "tools/svg.h"

namespace specpress::tools {

std::string diagnose_html(const DiagnoseReport& r) {
  // the charts plot the positions some block start scored (a short trajectory scores only the first few)
  std::vector<double> pos_x, top1, acc, kl;
  for (size_t k = 0; k < r.positions.size(); ++k) {
    if (r.positions[k].count == 0) continue;
    pos_x.push_back(static_cast<double>(k + 1));
    top1.push_back(r.positions[k].top1);
    acc.push_back(r.positions[k].chain_acceptance);
    kl.push_back(r.positions[k].kl);
  }
  // Acceptance-length histogram, counted over the block starts whose whole block lies in the trajectory.
  int64_t whole_blocks = 0;
  for (int64_t n : r.acceptance_length_counts) whole_blocks += n;
  std::vector<std::string> len_labels;
  std::vector<double> hist;
  for (size_t a = 0; a < r.acceptance_length_counts.size(); ++a) {
    len_labels.push_back(std::to_string(a + 1));
    hist.push_back(static_cast<double>(r.acceptance_length_counts[a]) / std::max<int64_t>(whole_blocks, 1));
  }
  std::vector<double> cal_x, cal_acc, cal_diag;
  for (const auto& c : r.calibration) {
    if (c.count == 0) continue;
    cal_x.push_back(c.mean_confidence);
    cal_acc.push_back(c.accuracy);
    cal_diag.push_back(c.mean_confidence);
  }
  std::vector<double> layer_x;
  for (size_t l = 0; l < r.layer_top1.size(); ++l) layer_x.push_back(static_cast<double>(l));

  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>specpress diagnose</title>"
      "<style>body{font-family:sans-serif;margin:24px;max-width:1400px}"
      "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
      ".charts{display:flex;flex-wrap:wrap;gap:16px}</style></head><body>\n";
  html += fmt::format("<h1>specpress diagnose: {}</h1>\n<p>{} samples, {} trajectory tokens, {} block starts, block size {}, "
                      "tapped layers {}</p>\n",
                      html_escape(r.options.dataset), r.samples, r.trajectory_tokens, r.block_starts, r.block_size,
                      fmt::join(r.tap_layers, ", "));
  html += fmt::format("<p><small>{}</small></p>\n", html_escape(build_line()));
  if (r.interrupted)
    html += fmt::format("<p><b>Stopped by a signal after {} of the {} samples</b>: the numbers below cover "
                        "those.</p>\n", r.samples, r.samples_planned);
  const double expected_len = r.expected_acceptance_length();
  html += fmt::format("<p>Expected acceptance length along the target's trajectory: <b>{:.2f}</b> (over its {} block "
                      "starts{})</p>\n", expected_len, r.block_starts,
                      r.sampled.empty() ? "" : "; the temperatures' table pools only the starts whose whole block lies "
                                               "in the trajectory");
  html += "<div class=\"charts\">\n";
  html += svg_line_chart("Acceptance and top-1 agreement by draft position", pos_x,
                         {{"acceptance (positions 1..k all match)", acc, "#1f77b4"}, {"top-1 agreement", top1, "#ff7f0e"}},
                         1.0, "draft block position", "fraction");
  html += svg_bar_chart(fmt::format("Acceptance length histogram ({} whole blocks)", whole_blocks), len_labels,
                        {"steps", hist, "#2ca02c"}, 1.0, "fraction of whole-block starts");
  html += svg_line_chart("Calibration: draft confidence vs top-1 accuracy", cal_x,
                         {{"accuracy", cal_acc, "#d62728"}, {"perfect calibration", cal_diag, "#999999"}}, 1.0,
                         "mean draft confidence in bin", "accuracy");
  html += svg_line_chart("Logit lens: layer top-1 agreement with the final layer", layer_x,
                         {{"agreement", r.layer_top1, "#9467bd"}}, 1.0, "layer (0 = embedding)", "fraction");
  html += svg_line_chart("KL(target || draft) by draft position", pos_x, {{"KL (nats)", kl, "#8c564b"}}, 0, "draft block position", "nats");
  html += "</div>\n<h2>Per position</h2>\n<table><tr><th>position</th><th>count</th><th>top-1</th><th>acceptance</th>"
          "<th>mean rank</th><th>KL</th></tr>\n";
  for (size_t k = 0; k < r.positions.size(); ++k) {
    const PositionStats& p = r.positions[k];
    if (p.count == 0)  // no block start scored this position: nothing measured
      html += fmt::format("<tr><td>{}</td><td>0</td><td>-</td><td>-</td><td>-</td><td>-</td></tr>\n", k + 1);
    else
      html += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.2f}</td><td>{:.3f}</td>"
                          "</tr>\n", k + 1, p.count, p.top1, p.chain_acceptance, p.mean_rank, p.kl);
  }
  html += "</table>\n<h2>By the target's entropy</h2>\n<p>Draft positions binned by the entropy (nats) of the "
          "target's distribution at them: how the draft's agreement falls as the target grows unsure.</p>\n"
          "<table><tr><th>entropy</th><th>count</th><th>mean entropy</th><th>top-1</th><th>KL</th></tr>\n";
  for (const auto& b : r.by_target_entropy) {
    const std::string range = std::isfinite(b.hi) ? fmt::format("[{}, {})", b.lo, b.hi) : fmt::format("&ge; {}", b.lo);
    if (b.count == 0)
      html += fmt::format("<tr><td>{}</td><td>0</td><td>-</td><td>-</td><td>-</td></tr>\n", range);
    else
      html += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.3f}</td><td>{:.3f}</td></tr>\n", range,
                          b.count, b.mean_entropy, b.top1, b.kl);
  }
  html += "</table>\n<h2>Draft-guided decoding</h2>\n<p>Fraction of the target's greedy choices (at the block starts, "
          "teacher-forced) that change when its log-probabilities are mixed with weight &lambda; with another source: "
          "the draft's first position, or tapped layer N's logit lens (the output of layer N, the lens chart's point "
          "N + 1).</p>\n<table><tr><th>source</th>"
          "<th>&lambda;</th><th>positions</th><th>changed</th><th>fraction</th></tr>\n";
  for (const auto& m : r.mixing)
    html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.4f}</td></tr>\n", html_escape(m.source), m.weight,
                        m.positions, m.changed, m.positions > 0 ? static_cast<double>(m.changed) / m.positions : 0.0);
  html += "</table>\n";
  if (!r.sampled.empty()) {
    html += "<h2>Acceptance when sampling</h2>\n<p>The expected acceptance of one speculative step sampled at each "
            "temperature, from the block starts of the greedy trajectory whose block lies in it (exact: the target "
            "verifies the draft's block there; T = 0 is greedy).</p>\n<table><tr><th>T</th><th>block starts</th><th>expected tau</th>";
    for (size_t k = 1; k <= r.sampled[0].per_position.size(); ++k) html += fmt::format("<th>p{}</th>", k);
    html += "</tr>\n";
    for (const auto& a : r.sampled) {
      if (a.block_starts == 0) {  // trajectories shorter than a block
        html += fmt::format("<tr><td>{}</td><td>0</td><td>-</td></tr>\n", a.temperature);
        continue;
      }
      html += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.3f}</td>", a.temperature, a.block_starts, a.expected_length);
      for (double p : a.per_position) html += fmt::format("<td>{:.3f}</td>", p);
      html += "</tr>\n";
    }
    html += "</table>\n";
  }
  html += "</body></html>\n";
  return html;
}

}  // namespace specpress::tools
