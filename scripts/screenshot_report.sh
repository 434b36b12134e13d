#!/usr/bin/env bash
# screenshot_report.sh — render an HTML report (e.g. from `specpress diagnose --html`) in headless
# Chromium (Debian package `chromium`) and save a PNG, to prove the page renders.
# Usage: scripts/screenshot_report.sh REPORT.html OUT.png [WIDTHxHEIGHT]
set -euo pipefail
html=${1:?usage: screenshot_report.sh REPORT.html OUT.png [WxH]}
png=${2:?usage: screenshot_report.sh REPORT.html OUT.png [WxH]}
size=${3:-1400,2000}
command -v chromium >/dev/null || { echo "screenshot_report: chromium not installed (apt-get install chromium)" >&2; exit 1; }
[ -f "$html" ] || { echo "screenshot_report: $html not found" >&2; exit 1; }
log=$(mktemp)
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="${size/x/,}" \
  --screenshot="$(realpath -m "$png")" "file://$(realpath "$html")" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
# Chromium prints page errors to its log; a report must render without any.
if grep -E 'Uncaught|ERROR:.*(Failed to load|net::)' "$log" >&2; then exit 1; fi
[ -s "$png" ] || { echo "screenshot_report: no PNG written" >&2; cat "$log" >&2; exit 1; }
echo "screenshot_report: wrote $png"
