// python_json.cpp — see python_json.h.
#include "tokenizer/python_json.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace specpress::tok {
namespace {

void write_string(const std::string& s, std::string& out) {
  out += '"';
  for (const unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
}

// Python's float repr: the shortest digits that round-trip (fmt's, as Python's), written fixed when the decimal
// exponent is in [-4, 16) (with ".0" when integral), else as d[.ddd]e+XX with at least two exponent digits.
void write_float(double x, std::string& out) {
  if (!std::isfinite(x)) {
    out += std::isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity";
    return;
  }
  std::string s = fmt::format("{}", x);  // shortest round trip, in fixed or exponent form
  std::string sign;
  if (!s.empty() && s[0] == '-') sign = "-", s.erase(0, 1);
  int exponent = 0;  // s = mantissa * 10^exponent
  if (const size_t e = s.find_first_of("eE"); e != std::string::npos) {
    exponent = std::atoi(s.c_str() + e + 1);
    s.resize(e);
  }
  std::string digits;
  int point = static_cast<int>(s.size());  // where the decimal point is in the mantissa's digits
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '.') point = static_cast<int>(digits.size());
    else digits += s[i];
  }
  // leading zeros off (0.001 -> "1" with the point moved); an all-zero value is 0.0
  size_t lead = digits.find_first_not_of('0');
  if (lead == std::string::npos) {
    out += sign + "0.0";
    return;
  }
  digits.erase(0, lead);
  point -= static_cast<int>(lead);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = point + exponent;  // value = 0.d1d2... * 10^decpt
  out += sign;
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= n) {
      out += digits + std::string(decpt - n, '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out += digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    const int e = decpt - 1;
    out += fmt::format("e{}{:02d}", e < 0 ? '-' : '+', std::abs(e));
  }
}

void write(const nlohmann::ordered_json& v, std::string& out) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += ", ";
        first = false;
        write_string(key, out);
        out += ": ";
        write(item, out);
      }
      out += '}';
      break;
    }
    case nlohmann::ordered_json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out += ", ";
        write(v[i], out);
      }
      out += ']';
      break;
    }
    case nlohmann::ordered_json::value_t::string: write_string(v.get_ref<const std::string&>(), out); break;
    case nlohmann::ordered_json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case nlohmann::ordered_json::value_t::number_float: write_float(v.get<double>(), out); break;
    case nlohmann::ordered_json::value_t::null:
    case nlohmann::ordered_json::value_t::discarded: out += "null"; break;
    default: out += v.dump(); break;  // integers
  }
}

}  // namespace

std::string python_json(const nlohmann::ordered_json& value) {
  std::string out;
  write(value, out);
  return out;
}

}  // namespace specpress::tok
