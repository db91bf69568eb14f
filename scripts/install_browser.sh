#!/usr/bin/env bash
# Headless Chromium and its WebDriver from Debian, for the test that opens report.html in a real
# browser (tests/test_browser.py). Needs root (or sudo); a no-op where both are installed already.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
