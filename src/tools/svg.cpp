// svg.cpp — see svg.h.
#include "tools/svg.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace specpress::tools {
namespace {

constexpr double kW = 640, kH = 300, kLeft = 60, kRight = 20, kTop = 36, kBottom = 50;

double nice_max(double v) {
  if (!(v > 0)) return 1.0;
  double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

std::string frame(const std::string& title, double y_max, const std::string& y_label, const std::string& x_label) {
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">"
      "<title>{}</title><rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
      "<text x=\"{}\" y=\"20\" font-size=\"15\" font-family=\"sans-serif\" font-weight=\"bold\">{}</text>",
      kW, kH, kW, kH, html_escape(title), kLeft, html_escape(title));
  const double plot_h = kH - kTop - kBottom;
  for (int i = 0; i <= 4; ++i) {
    const double v = y_max * i / 4, y = kTop + plot_h * (1 - i / 4.0);
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>", kLeft, y, kW - kRight, y);
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\" font-family=\"sans-serif\">{:.3g}</text>",
                     kLeft - 6, y + 4, v);
  }
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>", kLeft, kTop, kLeft, kH - kBottom);
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>", kLeft, kH - kBottom, kW - kRight,
                   kH - kBottom);
  s += fmt::format("<text x=\"14\" y=\"{}\" font-size=\"12\" font-family=\"sans-serif\" transform=\"rotate(-90 14 {})\" "
                   "text-anchor=\"middle\">{}</text>",
                   kTop + plot_h / 2, kTop + plot_h / 2, html_escape(y_label));
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" font-family=\"sans-serif\" text-anchor=\"middle\">{}</text>",
                   (kLeft + kW - kRight) / 2, kH - 10, html_escape(x_label));
  return s;
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string svg_bar_chart(const std::string& title, const std::vector<std::string>& x_labels, const Series& series,
                          double y_max, const std::string& y_label) {
  double top = y_max > 0 ? y_max : nice_max(series.y.empty() ? 1.0 : *std::max_element(series.y.begin(), series.y.end()));
  std::string s = frame(title, top, y_label, "");
  const double plot_w = kW - kLeft - kRight, plot_h = kH - kTop - kBottom;
  const double n = std::max<double>(1, static_cast<double>(series.y.size()));
  const double slot = plot_w / n, bar = slot * 0.7;
  for (size_t i = 0; i < series.y.size(); ++i) {
    const double v = std::clamp(series.y[i], 0.0, top), h = plot_h * v / top;
    const double x = kLeft + slot * static_cast<double>(i) + (slot - bar) / 2;
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{}: {:.4g}</title></rect>",
                     x, kTop + plot_h - h, bar, h, series.color, html_escape(i < x_labels.size() ? x_labels[i] : ""), series.y[i]);
    if (i < x_labels.size())
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" font-family=\"sans-serif\">{}</text>",
                       x + bar / 2, kH - kBottom + 15, html_escape(x_labels[i]));
  }
  return s + "</svg>";
}

std::string svg_line_chart(const std::string& title, const std::vector<double>& x, const std::vector<Series>& series,
                           double y_max, const std::string& x_label, const std::string& y_label) {
  double top = y_max;
  if (!(top > 0)) {
    double m = 0;
    for (const auto& se : series)
      for (double v : se.y) m = std::max(m, v);
    top = nice_max(m);
  }
  std::string s = frame(title, top, y_label, x_label);
  const double plot_w = kW - kLeft - kRight, plot_h = kH - kTop - kBottom;
  const double x0 = x.empty() ? 0 : *std::min_element(x.begin(), x.end());
  const double x1 = x.empty() ? 1 : *std::max_element(x.begin(), x.end());
  auto px = [&](double v) { return kLeft + (x1 > x0 ? (v - x0) / (x1 - x0) : 0.5) * plot_w; };
  auto py = [&](double v) { return kTop + plot_h * (1 - std::clamp(v, 0.0, top) / top); };
  for (size_t i = 0; i < x.size(); ++i)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" font-family=\"sans-serif\">{:.3g}</text>",
                     px(x[i]), kH - kBottom + 15, x[i]);
  double legend_y = kTop + 4;
  for (const auto& se : series) {
    std::string points;
    for (size_t i = 0; i < x.size() && i < se.y.size(); ++i) points += fmt::format("{:.1f},{:.1f} ", px(x[i]), py(se.y[i]));
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", points, se.color);
    for (size_t i = 0; i < x.size() && i < se.y.size(); ++i)
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{}: {:.4g}</title></circle>", px(x[i]),
                       py(se.y[i]), se.color, html_escape(se.name), se.y[i]);
    s += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"10\" height=\"10\" fill=\"{}\"/>"
                     "<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" font-family=\"sans-serif\">{}</text>",
                     kW - kRight - 250, legend_y, se.color, kW - kRight - 235, legend_y + 9, html_escape(se.name));
    legend_y += 15;
  }
  return s + "</svg>";
}

}  // namespace specpress::tools
