#!/usr/bin/env bash
# Screenshot a batchsim report.html in headless Chromium, to look at the page as a reader
# would (docs/how-to/read-the-report.md). The page is self-contained, so nothing is fetched.
#
#   scripts/render_report.sh results/quickstart/report.html [screenshot.png] [height_px]
#
# The screenshot is 1200 px wide and height_px tall (default 3400: a two-arm report with
# its three plots; what is below is cut, not scaled). It defaults to report.png beside the page.
# Needs a Chromium on PATH: chromium-headless-shell (Debian: apt-get install
# chromium-headless-shell), chromium, chromium-browser or google-chrome.
set -euo pipefail

page=${1:?usage: render_report.sh REPORT_HTML [SCREENSHOT_PNG] [HEIGHT_PX]}
shot=${2:-$(dirname "$page")/report.png}
height=${3:-3400}
[[ -f $page ]] || { echo "render_report.sh: $page: no such file" >&2; exit 2; }

browser=""
for candidate in chromium-headless-shell chromium chromium-browser google-chrome; do
  if command -v "$candidate" >/dev/null; then browser=$candidate; break; fi
done
[[ -n $browser ]] || { echo "render_report.sh: no headless Chromium on PATH" >&2; exit 3; }

flags=(--headless --disable-gpu --hide-scrollbars "--window-size=1200,$height")
[[ $(id -u) == 0 ]] && flags+=(--no-sandbox)  # Chromium refuses to sandbox as root
"$browser" "${flags[@]}" "--screenshot=$(realpath -m "$shot")" "file://$(realpath "$page")" \
  >/dev/null 2>&1
[[ -s $shot ]] || { echo "render_report.sh: $browser wrote no screenshot" >&2; exit 1; }
echo "wrote $shot"
