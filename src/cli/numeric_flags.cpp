// numeric_flags.cpp — see numeric_flags.h.
#include "cli/numeric_flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace specpress::cli {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Digits from `i`; returns the index past them.
size_t skip_digits(const std::string& s, size_t i) {
  while (i < s.size() && is_digit(s[i])) ++i;
  return i;
}

std::string check_integer(bool is_unsigned, std::string& text) {
  const std::string expected = is_unsigned ? "a non-negative decimal integer" : "a decimal integer";
  size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) i = 1;
  const size_t end = skip_digits(text, i);
  if (text.empty()) return "empty value (expected " + expected + ")";
  if (end == i || end != text.size() || (is_unsigned && negative))
    return "expected " + expected + ", found '" + text + "'";
  size_t first = text.find_first_not_of('0', i);
  const std::string digits = first == std::string::npos ? "0" : text.substr(first);
  const std::string plain = (negative && digits != "0" ? "-" : "") + digits;
  errno = 0;
  if (is_unsigned)
    (void)std::strtoull(plain.c_str(), nullptr, 10);
  else
    (void)std::strtoll(plain.c_str(), nullptr, 10);
  if (errno == ERANGE)
    return "'" + text + "' is out of range (expected " + expected + " within " +
           (is_unsigned ? "0 .. 18446744073709551615)" : "-9223372036854775808 .. 9223372036854775807)");
  text = plain;
  return "";
}

std::string check_float(const std::string& text) {
  const std::string expected = "expected a finite decimal number";
  if (text.empty()) return "empty value (" + expected + ")";
  // [+-] digits [. digits] [e [+-] digits], with digits on at least one side of the point: no "inf", "nan" or hex
  size_t i = text[0] == '-' || text[0] == '+' ? 1 : 0;
  const size_t int_end = skip_digits(text, i);
  size_t frac_end = int_end;
  if (frac_end < text.size() && text[frac_end] == '.') frac_end = skip_digits(text, frac_end + 1);
  const bool mantissa = int_end > i || frac_end > int_end + 1;
  size_t end = frac_end;
  if (mantissa && end < text.size() && (text[end] == 'e' || text[end] == 'E')) {
    size_t e = end + 1;
    if (e < text.size() && (text[e] == '-' || text[e] == '+')) ++e;
    const size_t e_end = skip_digits(text, e);
    end = e_end > e ? e_end : text.size() + 1;  // an exponent without digits fails below
  }
  if (!mantissa || end != text.size()) return expected + ", found '" + text + "'";
  errno = 0;
  const double value = std::strtod(text.c_str(), nullptr);
  // ERANGE: past the double range, or below its normal numbers (1e-400 would read as 0: --temp 1e-400 greedy)
  if (!std::isfinite(value) || errno == ERANGE)
    return "'" + text + "' is out of range (" + expected + " of magnitude 2.2e-308 to 1.8e308, or 0)";
  return "";
}

void add_checks(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    const std::string base = type.substr(0, type.find(':'));
    if (base != "INT" && base != "UINT" && base != "FLOAT") continue;
    // a transform: it runs before the option's own checks and may rewrite the text (check() would copy it)
    opt->transform(CLI::Validator([base](std::string& text) { return check_numeric_text(base, text); }, ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) add_checks(*sub);
}

}  // namespace

std::string check_numeric_text(const std::string& type, std::string& text) {
  if (type == "FLOAT") return check_float(text);
  return check_integer(type == "UINT", text);
}

void check_numeric_flags(CLI::App& app) { add_checks(app); }

}  // namespace specpress::cli
