// svg.h — minimal inline-SVG charts (bars and lines with axes, ticks and labels) for the
// self-contained HTML reports; no scripts, no external resources.
#pragma once
#include <string>
#include <vector>

namespace specpress::tools {

struct Series {
  std::string name;
  std::vector<double> y;
  std::string color;
};

// x labels under each bar/point; y axis from 0 to y_max (<= 0: from the data).
std::string svg_bar_chart(const std::string& title, const std::vector<std::string>& x_labels, const Series& series,
                          double y_max, const std::string& y_label);
std::string svg_line_chart(const std::string& title, const std::vector<double>& x, const std::vector<Series>& series,
                           double y_max, const std::string& x_label, const std::string& y_label);
// Escapes &, <, >, " for HTML text and attributes.
std::string html_escape(const std::string& text);

}  // namespace specpress::tools
