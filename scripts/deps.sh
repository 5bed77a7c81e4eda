#!/bin/sh
# Installs the Debian packages named on the command line that are missing.
# Make calls it before building, so `make test` is a complete set-up on a
# fresh Debian 12 machine. Installing needs root; without it the script
# names what is missing and fails.
set -eu

missing=
for pkg in "$@"; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
	[ "$status" = installed ] || missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing Debian packages:$missing (run as root, or install them)" >&2
	exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
