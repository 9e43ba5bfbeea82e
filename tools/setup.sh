# Shared by tools/dev.sh and tools/test.sh: install the Debian packages the
# project needs when they are missing. Sourced, not run.

# How long apt-get waits for another package manager to let go of its lock
# (on a new cloud machine, unattended-upgrades often holds it for minutes)
# before giving up. apt's DPkg::Lock::Timeout covers the dpkg frontend lock
# and, for `apt-get update`, the package lists lock.
APT_LOCK_WAIT="${APT_LOCK_WAIT:-300}"

# need_packages CMD:PKG ...: apt-get install every PKG whose CMD is missing.
need_packages() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]} (if another apt or dpkg holds the package manager's lock, waiting for it up to ${APT_LOCK_WAIT}s)" >&2
  $sudo apt-get -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" \
    install -y -qq "${missing[@]}" >/dev/null
}
